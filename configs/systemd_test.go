package configs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

const (
	unitFile  = "snapd-ml.service"
	sliceFile = "snapd-ml.slice" // the unit's Slice=
)

// maxExposure is the highest `systemd-analyze security` exposure the unit
// may have: at most 3.0, the hardening target for the unit.
const maxExposure = 3.0

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd; scripts/test.sh installs it)")
	}
	return p
}

// unitWithBinary copies the unit into a temp dir with ExecStart pointing at
// a freshly built snapd (verify checks the command is executable) and
// returns its path.
func unitWithBinary(t *testing.T) string {
	t.Helper()
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "snapd")
	cmd := testutil.GoBuild("", bin, "../cmd/snapd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/snapd ") {
		t.Fatal("ExecStart no longer runs /usr/local/bin/snapd; update the test")
	}
	u := strings.ReplaceAll(string(unit), "/usr/local/bin/snapd ", bin+" ")
	p := filepath.Join(dir, unitFile)
	if err := os.WriteFile(p, []byte(u), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSystemdUnitVerifies runs `systemd-analyze verify` on the unit (with
// ExecStart pointing at a real snapd binary).
func TestSystemdUnitVerifies(t *testing.T) {
	sa := systemdAnalyze(t)
	p := unitWithBinary(t)
	slice, err := os.ReadFile(sliceFile)
	if err != nil {
		t.Fatal(err)
	}
	sp := filepath.Join(filepath.Dir(p), sliceFile)
	if err := os.WriteFile(sp, slice, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--man=no", sp, p).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestSystemdUnitSecurity checks the unit's exposure offline
// (`systemd-analyze security --offline=yes`, systemd >= 250).
func TestSystemdUnitSecurity(t *testing.T) {
	sa := systemdAnalyze(t)
	if out, err := exec.Command(sa, "security", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "--offline") {
		t.Skip("this systemd-analyze has no security --offline (systemd < 250)")
	}
	p := unitWithBinary(t)
	thr := strconv.Itoa(int(maxExposure * 10)) // --threshold is in tenths
	out, err := exec.Command(sa, "security", "--offline=yes", "--no-pager", "--threshold="+thr, p).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(unitFile) + `: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure in the output (%v):\n%s", err, out)
	}
	exp, perr := strconv.ParseFloat(string(m[1]), 64)
	if perr != nil || exp > maxExposure || err != nil {
		t.Fatalf("exposure %s (max %.1f), exit %v:\n%s", m[1], maxExposure, err, out)
	}
	t.Logf("systemd-analyze security: exposure %.1f", exp)
}

// TestSystemdUnitNames: the unit must not collide with Canonical's snapd.
func TestSystemdUnitNames(t *testing.T) {
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	u := string(b)
	for _, want := range []string{"Type=notify", "StateDirectory=snapd-ml\n", "--state-dir /var/lib/snapd-ml", "User=snapd-ml", "MemoryMax=", "CPUWeight=",
		"Slice=" + sliceFile + "\n", "CPUSchedulingPolicy=idle\n"} {
		if !strings.Contains(u, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	if sb, err := os.ReadFile(sliceFile); err != nil || !strings.Contains(string(sb), "\nCPUWeight=idle\n") {
		t.Errorf("%s: no CPUWeight=idle (%v)", sliceFile, err)
	}
	if regexp.MustCompile(`/var/lib/snapd(\s|/|$)`).MatchString(u) || regexp.MustCompile(`(?m)^[^#].*/etc/snapd/`).MatchString(u) {
		t.Error("unit uses Canonical snapd's paths")
	}
}
