package gitexec

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestSubcommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-C", "/r", "-c", "a=b", "cat-file", "--batch"}, "cat-file"},
		{[]string{"--git-dir", "/r", "push", "--", "x"}, "push"},
		{[]string{"--no-pager", "log"}, "log"},
		{[]string{"-C"}, "(none)"},
		{nil, "(none)"},
	} {
		if got := subcommand(c.args); got != c.want {
			t.Errorf("subcommand(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

// The inherited environment loses every GIT_* variable but those the
// caller names, and those Drop names; what the caller sets is kept.
func TestEnviron(t *testing.T) {
	t.Setenv("GIT_DIR", "/somewhere/else")
	t.Setenv("GIT_SSH_COMMAND", "ssh -i user-key")
	t.Setenv("SSH_ASKPASS_REQUIRE", "force")
	t.Setenv("SNAPD_GITEXEC_TEST", "kept")
	env := strings.Join(Environ(Options{Env: []string{"GIT_NO_REPLACE_OBJECTS=1"}, Drop: []string{"SSH_ASKPASS*"}}), "\n") + "\n"
	for _, bad := range []string{"GIT_DIR=", "GIT_SSH_COMMAND=", "SSH_ASKPASS_REQUIRE="} {
		if strings.Contains(env, bad) {
			t.Errorf("%s leaked into the child's environment", bad)
		}
	}
	for _, good := range []string{"GIT_NO_REPLACE_OBJECTS=1\n", "SNAPD_GITEXEC_TEST=kept\n"} {
		if !strings.Contains(env, good) {
			t.Errorf("%q missing from the child's environment", good)
		}
	}
	env = strings.Join(Environ(Options{Inherit: []string{"GIT_SSH_COMMAND"}}), "\n") + "\n"
	if !strings.Contains(env, "GIT_SSH_COMMAND=ssh -i user-key\n") || strings.Contains(env, "GIT_DIR=") {
		t.Errorf("Inherit: %q", env)
	}
}

// A real git: GIT_DIR from the parent's environment does not redirect it.
func TestGitDirDoesNotLeak(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	if err := Run(context.Background(), Options{}, "init", "-q", dir); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_DIR", t.TempDir()) // not a repository: git would fail
	out, err := Output(context.Background(), Options{Dir: dir}, "rev-parse", "--is-inside-work-tree")
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Fatalf("rev-parse with GIT_DIR in the parent: %q, %v", out, err)
	}
	// What the caller sets explicitly is honoured.
	_, err = Output(context.Background(), Options{Dir: dir, Env: []string{"GIT_DIR=" + t.TempDir()}}, "rev-parse", "--git-dir")
	var ge *Error
	if !errors.As(err, &ge) || ge.ExitCode <= 0 || ge.Op != "rev-parse" || ge.Stderr == "" {
		t.Fatalf("explicit GIT_DIR to a non-repository: %#v", err)
	}
}

// A git that is not there fails to start with an *Error.
func TestStartFailure(t *testing.T) {
	err := Run(context.Background(), Options{Git: "/nonexistent/git"}, "status")
	var ge *Error
	if !errors.As(err, &ge) || ge.ExitCode != -1 || ge.Reason != "" || ge.Op != "status" ||
		!strings.Contains(err.Error(), "start /nonexistent/git") {
		t.Fatalf("%#v", err)
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{limit: 10}
	for i := 0; i < 100; i++ {
		tb.Write([]byte("0123456789abc"))
		if n := len(tb.String()); n > 10 {
			t.Fatalf("tail of %d bytes", n)
		}
	}
	if got := tb.String(); got != "3456789abc" {
		t.Errorf("tail %q", got)
	}
	if len(tb.buf) > 20 {
		t.Errorf("kept %d bytes", len(tb.buf))
	}
}
