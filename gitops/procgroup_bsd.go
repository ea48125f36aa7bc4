//go:build unix && !linux

package gitops

import (
	"os/exec"
	"syscall"
	"time"
)

// inOwnGroup runs cmd in its own process group, killed whole (SIGKILL to
// -pgid) when cmd's context ends; pipes still held 5 s after are closed.
// There is no Pdeathsig here: a group outlives a snapd that is killed
// (reapStale, which needs /proc, cannot find it either).
func inOwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
}
