package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolveVersion(t *testing.T) {
	bi := func(mv string, settings ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "github.com/snapd-ml/snapd", Version: mv}}
		for i := 0; i+1 < len(settings); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return b
	}
	cases := []struct {
		name, linked string
		bi           *debug.BuildInfo
		want         versionInfo
	}{
		{"release.sh", "v1.2.3-4-gabcdef0", bi("(devel)", "vcs.revision", "abcdef0123", "vcs.modified", "false"),
			versionInfo{Version: "v1.2.3-4-gabcdef0", Revision: "abcdef0123", GoVersion: "go1.99"}},
		{"go install @v0.4.0", "dev", bi("v0.4.0"), versionInfo{Version: "v0.4.0", GoVersion: "go1.99"}},
		{"go install @latest (pseudo)", "dev", bi("v0.0.0-20261124050000-abcdef012345"), versionInfo{Version: "v0.0.0-20261124050000-abcdef012345", GoVersion: "go1.99"}},
		{"go build in a work tree", "dev", bi("(devel)", "vcs.revision", "0123", "vcs.modified", "true"),
			versionInfo{Version: "dev", Revision: "0123", Modified: true, GoVersion: "go1.99"}},
	}
	for _, c := range cases {
		got := resolveVersion(c.linked, c.bi)
		got.Platform = ""
		if got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
	if v := resolveVersion("", nil); v.Version != "dev" || v.GoVersion == "" {
		t.Errorf("no build info: %+v", v)
	}
}

// TestReleaseBinaryVersion builds with scripts/release.sh and checks the
// binary reports `git describe` in `snapd version`, `--json` and --version.
func TestReleaseBinaryVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	describe, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	want := strings.TrimSpace(string(describe))
	bin := filepath.Join(t.TempDir(), "snapd")
	cmd := exec.Command("../../scripts/release.sh")
	cmd.Env = append(os.Environ(), "OUT="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, out)
	}
	if _, err := os.Stat(bin + ".sha256"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// The work tree may change between git describe and the build (other
	// files being edited): compare without the -dirty suffix.
	if strings.TrimSuffix(v.Version, "-dirty") != strings.TrimSuffix(want, "-dirty") || v.GoVersion == "" || v.Platform == "" {
		t.Fatalf("version --json %+v, git describe %s", v, want)
	}
	out, _ = exec.Command(bin, "--version").Output()
	if !strings.Contains(string(out), v.Version) {
		t.Fatalf("--version: %s", out)
	}
	out, _ = exec.Command(bin, "version").Output()
	if !strings.HasPrefix(string(out), "snapd "+v.Version+"\n") {
		t.Fatalf("version: %s", out)
	}
}
