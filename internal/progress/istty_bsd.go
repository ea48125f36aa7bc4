//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package progress

import "golang.org/x/sys/unix"

// isTerminal reports whether the descriptor is a terminal (TIOCGETA
// succeeds).
func isTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TIOCGETA)
	return err == nil
}
