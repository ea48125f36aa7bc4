//go:build unix

package gitops

import "syscall"

// killProcess sends SIGKILL to the process pid (reapStale; the git
// children themselves are killed by internal/gitexec).
func killProcess(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
