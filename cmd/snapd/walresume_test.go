package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/wal"
)

// TestWALListResumedFrom: a request that declares a resume shows it in
// `snapd wal list` (RESUMED_FROM column) and its --json (resumed_from);
// ordinary requests show "-" and omit the field.
func TestWALListResumedFrom(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	w, err := wal.OpenWriter(filepath.Join(state, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []wal.Request{
		{Gen: 3, Time: time.Now(), Requester: "t", Source: "/g/3"},
		{Gen: 3, Time: time.Now(), Requester: "t", Source: "/g/3b", ResumedFrom: 2},
	} {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	code, out, errs := runCLI("wal", "list", "--state-dir", state)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[0], "RESUMED_FROM") {
		t.Fatalf("wal list: exit %d\n%s%s", code, out, errs)
	}
	col := strings.Index(lines[0], "RESUMED_FROM")
	if !strings.HasPrefix(lines[1][col:], "- ") || !strings.HasPrefix(lines[2][col:], "2 ") {
		t.Fatalf("RESUMED_FROM column:\n%s", out)
	}
	code, out, errs = runCLI("wal", "list", "--json", "--state-dir", state)
	var doc struct {
		Requests []map[string]any `json:"requests"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Requests) != 2 {
		t.Fatalf("wal list --json: exit %d\n%s%s", code, out, errs)
	}
	if _, ok := doc.Requests[0]["resumed_from"]; ok || doc.Requests[1]["resumed_from"] != float64(2) {
		t.Fatalf("resumed_from: %v", doc.Requests)
	}
}
