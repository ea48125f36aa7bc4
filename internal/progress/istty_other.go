//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd && !windows

package progress

// isTerminal reports false: on this system snapd does not detect
// terminals, so no progress line is drawn.
func isTerminal(fd uintptr) bool { return false }
