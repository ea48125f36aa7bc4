//go:build unix && !linux

package gitexec

import (
	"os/exec"
	"syscall"
)

// inOwnGroup runs cmd in its own process group, killed whole (SIGKILL to
// -pgid) when cmd's context ends. There is no Pdeathsig here: a group
// outlives a snapd that is killed.
func inOwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
