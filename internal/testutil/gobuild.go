package testutil

import (
	"os"
	"os/exec"
)

// GoBuild returns the command that builds package pkg into out, run in
// dir, with the compile settings of scripts/release.sh (CGO_ENABLED=0,
// -trimpath). Tests that need a snapd binary build it this way: it is the
// binary users install, and its compiled packages are those of the
// release build the install test runs and of scripts/test.sh's go vet,
// so a cold build cache compiles the module once for all of them.
func GoBuild(dir, out, pkg string) *exec.Cmd {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}
