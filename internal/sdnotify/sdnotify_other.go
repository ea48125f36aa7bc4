//go:build !linux

package sdnotify

// Notify does nothing and returns false: there is no systemd on this
// system, whatever socket says.
func Notify(socket, state string) (bool, error) { return false, nil }

// ReloadingState is RELOADING=1 (no MONOTONIC_USEC stamp: there is no
// systemd to read it on this system).
func ReloadingState() string { return Reloading }
