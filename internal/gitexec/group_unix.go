//go:build unix

package gitexec

import "syscall"

// killGroup sends SIGKILL to the process group pgid (what is left of a
// git child's group once git itself has exited or been killed); pgid 0
// (git never started) is left alone.
func killGroup(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}
