package main

import (
	"strings"
	"testing"
)

func TestFlagTypoSuggestsNearest(t *testing.T) {
	for _, c := range []struct {
		args      []string
		bad, hint string
	}{
		{[]string{"status", "--stat-dir", "x"}, "--stat-dir", "snapd: hint: did you mean --state-dir?"}, // inherited (root) flag
		{[]string{"verify", "x.wtxt", "--pubky", "k"}, "--pubky", "snapd: hint: did you mean --pubkey?"},
		{[]string{"status", "--jsno"}, "--jsno", "snapd: hint: did you mean --json?"},
		{[]string{"status", "--zzzzzzzz"}, "--zzzzzzzz", ""},
	} {
		code, _, errs := runCLI(c.args...)
		if code != exitUsage || !strings.Contains(errs, "snapd: error: unknown flag: "+c.bad) {
			t.Errorf("snapd %s: exit %d\n%s", strings.Join(c.args, " "), code, errs)
		}
		if c.hint == "" && strings.Contains(errs, "did you mean") || !strings.Contains(errs, c.hint) {
			t.Errorf("snapd %s: want hint %q\n%s", strings.Join(c.args, " "), c.hint, errs)
		}
	}
}
