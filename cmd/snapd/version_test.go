package main

import (
	"runtime/debug"
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
		got := resolveVersion(c.linked, "", c.bi)
		got.Platform = ""
		if got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
	if v := resolveVersion("", "", nil); v.Version != "dev" || v.GoVersion == "" {
		t.Errorf("no build info: %+v", v)
	}
	// -buildvcs=false: no vcs settings, the linked revision fills in.
	if v := resolveVersion("v1.0.0", "abcdef0123-dirty", bi("(devel)")); v.Revision != "abcdef0123" || !v.Modified || v.Version != "v1.0.0" {
		t.Errorf("linked revision: %+v", v)
	}
	if v := resolveVersion("v1.0.0", "abcdef0123", bi("(devel)", "vcs.revision", "fedcba9876", "vcs.modified", "false")); v.Revision != "fedcba9876" || v.Modified {
		t.Errorf("the toolchain's revision wins: %+v", v)
	}
}
