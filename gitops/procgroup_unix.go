//go:build unix

package gitops

import "syscall"

// killGroup sends SIGKILL to the process group pgid (what is left of a
// git child's group once git itself has exited or been killed).
func killGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

// killProcess sends SIGKILL to the process pid.
func killProcess(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
