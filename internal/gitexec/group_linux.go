package gitexec

import (
	"os/exec"
	"syscall"
)

// inOwnGroup runs cmd in its own process group, killed whole (SIGKILL to
// -pgid) when cmd's context ends, and dying with snapd (Pdeathsig), so no
// helper git starts outlives it.
func inOwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
