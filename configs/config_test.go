package configs

import (
	"strings"
	"testing"
	"time"
)

func TestExampleConfigIsDefault(t *testing.T) {
	c, err := Load("snapd.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	if *c != *d {
		t.Fatalf("example config differs from defaults:\n%+v\n%+v", c, d)
	}
}

func TestEmptyIsDefault(t *testing.T) {
	c, err := Parse(nil)
	if err != nil || *c != *Default() {
		t.Fatalf("%v %+v", err, c)
	}
}

func TestOverrides(t *testing.T) {
	c, err := Parse([]byte("snapshot:\n  rows_per_chunk: 128\n  build: abc123\nwal:\n  poll_interval: 250ms\nqueue:\n  policy: block\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Snapshot.RowsPerChunk != 128 || c.Snapshot.Build != "abc123" || time.Duration(c.WAL.PollInterval) != 250*time.Millisecond || c.Queue.Policy != "block" {
		t.Fatalf("%+v", c)
	}
	if c.Snapshot.Schema != "weights/v1" {
		t.Fatal("unset field lost its default")
	}
}

func TestStrictErrors(t *testing.T) {
	cases := map[string]string{
		"state_dir: x\nsnapshot:\n  rows_per_chunks: 3\n": `line 3: unknown key "rows_per_chunks"`,
		"bogus: 1\n":                              `line 1: unknown key "bogus"`,
		"queue:\n  policy: drop\n":                "queue.policy",
		"snapshot:\n  build: \"a b\"\n":           "snapshot.build",
		"ring:\n  keep: 0\n":                      "ring.keep",
		"git:\n  part_limit: 200000000\n":         "git.part_limit",
		"wal:\n  poll_interval: fast\n":           "line 2",
		"git:\n  path: /abs\n":                    "git.path",
		"a: 1\n---\nb: 2\n":                       "unknown key",
		"log:\n  format: xml\n":                   "log.format",
		"git:\n  layout: zip\n":                   "git.layout",
		"snapshot:\n  workers: -1\n":              "snapshot.workers",
		"git:\n  token_file: a\n  token_env: B\n": "git.token_file",
	}
	for in, want := range cases {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want error containing %q", in, err, want)
		}
	}
}
