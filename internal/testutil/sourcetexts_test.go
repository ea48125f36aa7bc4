package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSourceTexts(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\nimport \"fmt\"\n\nfunc f(m string) error {\n" +
		"\treturn fmt.Errorf(\"first line must be %q base=<hex64> (got %d)\", m, 1)\n}\n\n" +
		"const shape = `want <a> <b>`\n\nvar short = \"\\\"\"\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nvar tested = \"<from a test>\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := SourceTexts(t, dir)
	want := []string{" base=<hex64> (got ", "want <a> <b>"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	msg := "x.txt:1: first line must be \"M\" base=<hex64> (got 1)"
	in := []byte("zzzz base=<hex64> (got zzzz")
	if run, ok := EchoedRun(msg, in); !ok {
		t.Fatal("without the source texts the template run is not found; the test proves nothing")
	} else if _, ok := EchoedRun(msg, in, got...); ok {
		t.Fatalf("template run %q still taken for an echo", run)
	}
	if _, ok := EchoedRun(msg+` "<echoed-content>"`, []byte(`aa<echoed-content>bb`), got...); !ok {
		t.Fatal("a real echo is no longer found")
	}
}

func TestContainsValue(t *testing.T) {
	for _, c := range []struct {
		msg, v string
		want   bool
	}{
		{"step=301", "301", true},
		{"keys step (301)", "301", true},
		{"301", "301", true},
		{"commit b7f5b4c3019a: rank 0", "301", false},
		{"step=3010", "301", false},
		{"loss=0.41", "0.41", true},
		{"loss=10.41", "0.41", false},
		{"elapsed 0.412s", "0.41", false},
		{"a 3019a then step=301.", "301", true}, // a full stop ends it
		{"v 301.5", "301", false},
		{"a 3019a then step=301, b", "301", true},
	} {
		if got := ContainsValue(c.msg, c.v); got != c.want {
			t.Errorf("ContainsValue(%q, %q) = %v, want %v", c.msg, c.v, got, c.want)
		}
	}
}
