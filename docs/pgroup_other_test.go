//go:build !unix

package docs

import (
	"os/exec"
	"time"
)

// ownGroup: without process groups, a hung script's background jobs are
// left to the trap of the script (and WaitDelay stops waiting for them).
func ownGroup(cmd *exec.Cmd) { cmd.WaitDelay = 10 * time.Second }

// killGroup has nothing to kill without process groups.
func killGroup(*exec.Cmd) {}
