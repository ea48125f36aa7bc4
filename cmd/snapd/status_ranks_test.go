package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/pipeline"
)

// TestStatusShowsRanksCommitter: on the committer node of a sharded job
// snapd status shows the committer's state, and a failed round or a
// generation missing ranks past the timeout needs a person (exit 1 with
// the reason, in text and with --json).
func TestStatusShowsRanksCommitter(t *testing.T) {
	write := func(t *testing.T, st pipeline.RankStatus) string {
		t.Helper()
		state := t.TempDir()
		b, _ := json.Marshal(st)
		p := pipeline.RankStatusFile(state)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return state
	}
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	t.Run("ok", func(t *testing.T) {
		state := write(t, pipeline.RankStatus{LastCommitted: 4, Pending: 5, PendingSince: now, Missing: []int{1}, Updated: now})
		code, out, errs := runCLI("status", "--state-dir", state)
		if code != 0 || !strings.Contains(out, "ranks:       committer of a sharded job") || !strings.Contains(out, "  last committed generation: 4") ||
			!strings.Contains(out, "pending generation 5 (waiting since") {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
		code, out, _ = runCLI("status", "--state-dir", state, "--json")
		var doc struct {
			Ranks *pipeline.RankStatus `json:"ranks"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || doc.Ranks == nil || doc.Ranks.LastCommitted != 4 {
			t.Fatalf("--json: exit %d\n%s", code, out)
		}
	})
	for name, c := range map[string]struct {
		st   pipeline.RankStatus
		want string
	}{
		"failed round": {pipeline.RankStatus{LastCommitted: 4, LastError: "ledger: generation 000005: push refused", Updated: now},
			"ranks committer needs attention: ledger: generation 000005: push refused"},
		"timed out": {pipeline.RankStatus{LastCommitted: 4, Pending: 5, PendingSince: now, Missing: []int{1, 3}, TimedOut: true, Updated: now},
			"ranks committer needs attention: generation 5 is missing ranks [1 3] past ranks.timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			state := write(t, c.st)
			for _, args := range [][]string{{"status", "--state-dir", state}, {"status", "--state-dir", state, "--json"}} {
				code, out, errs := runCLI(args...)
				if code != exitInvalid || !strings.Contains(errs, "snapd: error: "+c.want) {
					t.Errorf("%v: exit %d\n%s%s", args, code, out, errs)
				}
			}
		})
	}
}
