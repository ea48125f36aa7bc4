package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// versionInfo is what `snapd version --json` prints and snapd_build_info
// exports.
type versionInfo struct {
	// Version: from `git describe` via -ldflags "-X main.version=..."
	// (scripts/release.sh), else the module version Go stamped (go install
	// ...@v1.2.3 or a pseudo-version), else "dev".
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"` // VCS commit the binary was built from
	Modified  bool   `json:"modified,omitempty"` // built from a work tree with changes
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// resolveVersion combines the link-time version and revision with the
// build info the Go toolchain embeds (bi may be nil). The toolchain's
// vcs.revision wins when present; linkedRev (a "-dirty" suffix marks a
// modified tree) fills in when the build had no VCS stamping.
func resolveVersion(linked, linkedRev string, bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: linked, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if rev, dirty := strings.CutSuffix(linkedRev, "-dirty"); rev != "" {
		v.Revision, v.Modified = rev, dirty
	}
	if bi == nil {
		if v.Version == "" {
			v.Version = "dev"
		}
		return v
	}
	v.GoVersion = bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if v.Version == "" || v.Version == "dev" {
		if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
			v.Version = mv
		} else {
			v.Version = "dev"
		}
	}
	return v
}

// currentVersion is this binary's version.
func currentVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return resolveVersion(version, revision, bi)
}

func newVersionCommand(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print snapd's version, the commit it was built from and the Go version",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			v := currentVersion()
			if asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			fmt.Fprintf(e.stdout, "snapd %s\n", v.Version)
			if v.Revision != "" {
				mod := ""
				if v.Modified {
					mod = " (modified)"
				}
				fmt.Fprintf(e.stdout, "commit %s%s\n", v.Revision, mod)
			}
			fmt.Fprintf(e.stdout, "%s %s\n", v.GoVersion, v.Platform)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, usageJSON)
	return cmd
}

// buildInfoCollector is snapd_build_info{version,revision,goversion} 1.
func buildInfoCollector() prometheus.Collector {
	v := currentVersion()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "snapd_build_info",
		Help:        "A metric with a constant '1' value labeled by the version, revision and Go version snapd was built with.",
		ConstLabels: prometheus.Labels{"version": v.Version, "revision": v.Revision, "goversion": v.GoVersion}},
		func() float64 { return 1 })
}

// durationSeconds makes the JSON log handler write durations as seconds
// (a float), where slog would write nanoseconds; the text handler keeps
// Go's human-readable form (1.25s).
func durationSeconds(groups []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key, a.Value.Duration().Seconds())
	}
	return a
}
