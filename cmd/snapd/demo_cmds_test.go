package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoPrintedCommandsWork runs the demo without --dir (its files are
// kept in a temporary directory it prints; the run TestDemo shares:
// shared.demo) and then every command it tells the user to run: snapd
// verify with the allowed_signers file, git verify-commit, snapd status,
// snapd log (which lists the metadata the demo's trainer attached).
func TestDemoPrintedCommandsWork(t *testing.T) {
	t.Parallel()
	out, _ := shared.demo(t)
	if !strings.Contains(out, "(files kept in "+filepath.Join(os.TempDir(), "snapd-demo-")) {
		t.Fatalf("demo does not say where its files are:\n%s", out)
	}
	var ran int
	for _, l := range strings.Split(out, "\n") {
		cmdline, ok := strings.CutPrefix(l, "  ")
		if !ok || !(strings.HasPrefix(cmdline, "snapd ") || strings.HasPrefix(cmdline, "git ")) {
			continue
		}
		if strings.ContainsAny(cmdline, `'"\$`) {
			t.Fatalf("test cannot split a quoted command: %s", cmdline)
		}
		args := strings.Fields(cmdline)
		switch args[0] {
		case "snapd":
			code, out, errs := runCLI(args[1:]...)
			if code != 0 {
				t.Fatalf("%s: exit %d\n%s%s", cmdline, code, out, errs)
			}
			if args[1] == "log" && !strings.Contains(out, "loss=0.5 step=2") {
				t.Fatalf("%s: generation 3's metadata not listed\n%s", cmdline, out)
			}
		case "git":
			out, err := exec.Command("git", args[1:]...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), `Good "git" signature`) {
				t.Fatalf("%s: %v\n%s", cmdline, err, out)
			}
		}
		ran++
	}
	if ran != 4 {
		t.Fatalf("ran %d printed commands, want 4 (verify, verify-commit, status, log):\n%s", ran, out)
	}
}
