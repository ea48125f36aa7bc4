package review

import (
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

func TestMetaTable(t *testing.T) {
	old, _ := snapshot.ParseUserMeta([]byte(`{"step":1000,"loss":0.52,"opt":"a|b"}`))
	new, _ := snapshot.ParseUserMeta([]byte(`{"step":1200,"loss":0.52,"lr":3e-4}`))
	got := MetaTable(old, new)
	want := "| metadata | old | new |\n|---|---|---|\n" +
		"| `loss` | `0.52` | `0.52` |\n" +
		"| **`lr`** | — | `0.0003` |\n" +
		"| **`opt`** | `\"a/b\"` | — |\n" +
		"| **`step`** | `1000` | `1200` |\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if MetaTable(nil, nil) != "" {
		t.Fatal("a table without metadata")
	}
	// The review body shows it.
	var b strings.Builder
	renderFile(&b, &FileResult{Path: "snapshots/current.wtxt", Status: StatusModified, HasPatch: true, BaseMeta: old, HeadMeta: new}, Options{}, 0)
	if !strings.Contains(b.String(), want) {
		t.Fatalf("review body lacks the table:\n%s", b.String())
	}
}
