package progress

import "golang.org/x/sys/windows"

// isTerminal reports whether the handle is a console (GetConsoleMode
// succeeds). A terminal that is not a Windows console (a mintty pipe) is
// not recognised: no progress line is drawn there.
func isTerminal(fd uintptr) bool {
	var mode uint32
	return windows.GetConsoleMode(windows.Handle(fd), &mode) == nil
}
