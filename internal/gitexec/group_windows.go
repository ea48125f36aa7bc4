package gitexec

import "os/exec"

// inOwnGroup leaves cmd as it is: Windows has no process groups to kill
// whole, so cancelling kills git itself (exec's default), and a helper it
// started (ssh, a credential helper) may outlive it.
func inOwnGroup(cmd *exec.Cmd) {}

// killGroup does nothing on Windows (no process groups; see inOwnGroup).
func killGroup(pgid int) {}
