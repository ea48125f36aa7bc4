//go:build unix

package docs

import (
	"os/exec"
	"syscall"
	"time"
)

// ownGroup runs cmd in its own process group, killed whole when cmd's
// context ends, so that a daemon a documented block started in the
// background cannot outlive a script that hangs.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
}

// killGroup kills what is left of cmd's process group after it exited.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
