package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the CLI as main does (hints included).
func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func mustNotExist(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s was created (%v)", p, err)
	}
}

// TestOperatorCommandsCreateNothing: status, wal list, queue list and gc on
// a mistyped state dir fail with exit 2 and a hint, and create nothing.
func TestOperatorCommandsCreateNothing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo")
	for _, args := range [][]string{
		{"status", "--state-dir", missing},
		{"status", "--json", "--state-dir", missing},
		{"wal", "list", "--state-dir", missing},
		{"queue", "list", "--state-dir", missing},
		{"queue", "retry", "--state-dir", missing},
		{"queue", "list", "--dir", filepath.Join(missing, "push-queue")},
		{"gc", "--keep", "1", "--state-dir", missing},
	} {
		code, _, stderr := runCLI(args...)
		if code != 2 || !strings.Contains(stderr, "snapd: hint: ") {
			t.Errorf("%v: exit %d\n%s", args, code, stderr)
		}
		mustNotExist(t, missing)
	}
	// An existing state dir without a push queue: the hint says why.
	code, _, stderr := runCLI("queue", "list", "--state-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "git.remote") {
		t.Errorf("queue list without a queue: exit %d\n%s", code, stderr)
	}
}

// TestStateDirFromEnvAndConfig: SNAPD_STATE_DIR and the config file's
// state_dir (--config or SNAPD_CONFIG) select the state dir of every
// command; --state-dir wins over both.
func TestStateDirFromEnvAndConfig(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.Mkdir(a, 0o700)
	os.Mkdir(b, 0o700)
	cfg := filepath.Join(dir, "snapd.yaml")
	os.WriteFile(cfg, []byte("state_dir: "+b+"\n"), 0o644)

	t.Setenv("SNAPD_STATE_DIR", a)
	if _, out, errs := runCLI("status"); !strings.Contains(out, "state dir:   "+a+"\n") {
		t.Fatalf("SNAPD_STATE_DIR: %s %s", out, errs)
	}
	if _, out, errs := runCLI("status", "--state-dir", b); !strings.Contains(out, "state dir:   "+b+"\n") {
		t.Fatalf("--state-dir over env: %s %s", out, errs)
	}
	t.Setenv("SNAPD_STATE_DIR", "")
	if _, out, errs := runCLI("--config", cfg, "status"); !strings.Contains(out, "state dir:   "+b+"\n") {
		t.Fatalf("--config: %s %s", out, errs)
	}
	t.Setenv("SNAPD_CONFIG", cfg)
	if _, out, errs := runCLI("wal", "list"); errs == "" || !strings.Contains(errs, filepath.Join(b, "wal")) {
		// b has no WAL: the error names b's WAL, so b was chosen.
		t.Fatalf("SNAPD_CONFIG: %s %s", out, errs)
	}
	// request-snapshot (a writer) uses the same state dir.
	src := filepath.Join(dir, "gen.safetensors")
	os.WriteFile(src, []byte("x"), 0o644)
	if code, _, errs := runCLI("request-snapshot", "--gen", "1", "--source", src); code != 0 {
		t.Fatalf("request-snapshot: %d %s", code, errs)
	}
	if code, out, errs := runCLI("wal", "list"); code != 0 || !strings.Contains(out, src) {
		t.Fatalf("wal list: %d %s %s", code, out, errs)
	}
}

// TestRunRefusesBeforeSideEffects: usage errors and a busy metrics port
// stop `snapd run` before it creates the state dir or generates keys.
func TestRunRefusesBeforeSideEffects(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ghCfg := filepath.Join(t.TempDir(), "gh.yaml")
	os.WriteFile(ghCfg, []byte("git: {remote: https://example.com/x.git}\ngithub: {repo: acme/models, token_file: /nonexistent/token}\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--queue-policy", "drop", "--metrics-addr", "off"}, "queue.policy"},
		{[]string{"--git-remote", "https://user:pw@example.com/x.git", "--metrics-addr", "off"}, "password"},
		{[]string{"--metrics-addr", busy.Addr().String()}, "snapd: hint: another process listens there"},
		{[]string{"--config", ghCfg, "--metrics-addr", "off"}, "github.token_file"},
	} {
		state := filepath.Join(t.TempDir(), "state")
		code, _, stderr := runCLI(append([]string{"run", "--state-dir", state}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d\n%s", c.args, code, stderr)
		}
		mustNotExist(t, state)
	}
	// request-snapshot with a bad requester creates no WAL.
	src := filepath.Join(t.TempDir(), "src")
	os.WriteFile(src, nil, 0o644)
	state := filepath.Join(t.TempDir(), "state")
	if code, _, stderr := runCLI("request-snapshot", "--state-dir", state, "--gen", "1", "--source", src, "--requester", "a b"); code != 2 || !strings.Contains(stderr, "requester") {
		t.Errorf("bad requester: exit %d\n%s", code, stderr)
	}
	mustNotExist(t, state)
	// And a usage error of the config file itself.
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(cfg, []byte("bogus: 1\n"), 0o644)
	state = filepath.Join(t.TempDir(), "state")
	if code, _, stderr := runCLI("run", "--config", cfg, "--state-dir", state); code != 2 || !strings.Contains(stderr, "bogus") {
		t.Errorf("bad config: exit %d\n%s", code, stderr)
	}
	mustNotExist(t, state)
}
