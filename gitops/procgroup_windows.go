package gitops

import (
	"os"
	"os/exec"
	"time"
)

// inOwnGroup makes cmd killable when its context ends; pipes still held
// 5 s after are closed. Windows has no process groups to kill whole:
// cancelling kills git itself (exec's default), and a helper it started
// (ssh, a credential helper) may outlive it.
func inOwnGroup(cmd *exec.Cmd) {
	cmd.WaitDelay = 5 * time.Second
}

// killGroup does nothing on Windows (no process groups; see inOwnGroup).
func killGroup(pgid int) {}

// killProcess terminates the process pid.
func killProcess(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	defer p.Release()
	return p.Kill()
}
