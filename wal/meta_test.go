package wal

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/snapshot"
)

func mustMeta(t testing.TB, js string) snapshot.UserMeta {
	t.Helper()
	m, err := snapshot.ParseUserMeta([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A request's metadata is one field, canonical JSON percent-encoded like
// src, read back unchanged; lines without it read as before.
func TestMetaLine(t *testing.T) {
	r := Request{Gen: 5, Time: time.Unix(0, 9), Requester: "py:1", Source: "/g/5", ResumedFrom: 2,
		Meta: mustMeta(t, `{"step":1200,"loss":0.41,"opt":"adam w 100%"}`)}
	line, err := r.AppendLine(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `snapreq/1 gen=5 ts=9 by=py:1 resumed_from=2 meta={"loss":0.41,"opt":"adam%20w%20100%25","step":1200} src=/g/5 crc=`
	if !strings.HasPrefix(string(line), want) {
		t.Fatalf("line %q\nwant %q...", line, want)
	}
	got, err := ParseLine(line)
	if err != nil || !got.Meta.Equal(r.Meta) || got.Source != r.Source || got.ResumedFrom != 2 {
		t.Fatalf("parsed %+v, %v", got, err)
	}
	old, err := ParseLine(withCRC("snapreq/1 gen=5 ts=9 by=py:1 src=/g/5"))
	if err != nil || old.Meta != nil {
		t.Fatalf("line without meta: %+v %v", old, err)
	}

	// A rank request carries its rank part's metadata the same way.
	rk := Request{Gen: 5, Time: time.Unix(0, 9), Requester: "x", Source: "/g", Rank: 1, WorldSize: 2, Meta: r.Meta}
	line, err = rk.AppendLine(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `snapreq/1 gen=5 ts=9 by=x rank=1 world_size=2 meta={"loss":0.41,`; !strings.HasPrefix(string(line), want) {
		t.Fatalf("rank line %q\nwant %q...", line, want)
	}
	if got, err := ParseLine(line); err != nil || !got.Meta.Equal(r.Meta) || got.Rank != 1 || got.WorldSize != 2 {
		t.Fatalf("rank line parsed %+v, %v", got, err)
	}

	// Writers refuse what the parser would.
	for name, bad := range map[string]Request{
		"order":    {Gen: 5, Time: time.Unix(0, 9), Requester: "x", Source: "/g", Meta: snapshot.UserMeta{{Key: "b", Value: "1"}, {Key: "a", Value: "1"}}},
		"value":    {Gen: 5, Time: time.Unix(0, 9), Requester: "x", Source: "/g", Meta: snapshot.UserMeta{{Key: "a", Value: "1.0"}}},
		"key":      {Gen: 5, Time: time.Unix(0, 9), Requester: "x", Source: "/g", Meta: snapshot.UserMeta{{Key: "a b", Value: "1"}}},
		"too long": {Gen: 5, Time: time.Unix(0, 9), Requester: "x", Source: "/" + strings.Repeat("s", 3100), Meta: mustMeta(t, `{"a":"`+strings.Repeat("x", 250)+`","b":"`+strings.Repeat(" ", 250)+`"}`)},
	} {
		_, err := bad.AppendLine(nil)
		if !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrLineTooLong) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Hand-made lines: not canonical, empty, in the wrong place.
	for _, body := range []string{
		`snapreq/1 gen=5 ts=9 by=x meta={"step":1.0} src=/g`,
		`snapreq/1 gen=5 ts=9 by=x meta={"b":1,"a":1} src=/g`,
		`snapreq/1 gen=5 ts=9 by=x meta={} src=/g`,
		`snapreq/1 gen=5 ts=9 by=x meta= src=/g`,
		`snapreq/1 gen=5 ts=9 by=x meta={"a":"%41"} src=/g`,
		`snapreq/1 gen=5 ts=9 by=x meta={"a":1} resumed_from=2 src=/g`,
	} {
		if _, err := ParseLine(withCRC(body)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// The Python helper writes metadata byte for byte as Go does, on a rank
// request too.
func TestPythonMeta(t *testing.T) {
	py := python(t)
	state := t.TempDir()
	prog := `
import sys
sys.path.insert(0, sys.argv[1])
import snapd_trainer as st
st.request_snapshot(4, "/g/gen 4", state_dir=sys.argv[2], requester="py:r", ts_ns=7, resumed_from=2,
    meta={"step": 1200, "epoch": 3, "loss": 0.41, "lr": 3e-4, "big": 1e21, "tiny": -1e-7, "f": 2.0, "ok": True,
          "none": None, "name": "run a/\u00e9\U0001F600 100%", "z": -0.0, "e20": 1e20, "n": -12345678912345})
st.request_snapshot(6, "/g/rank-1", state_dir=sys.argv[2], requester="py:r", ts_ns=8, rank=1, world_size=2, meta={"step": 1200})
for bad in ({"a b": 1}, {"x": [1]}, {"x": float("nan")}, {"x": 2**53 + 1}, {"x": "y" * 257}, {"k%d" % i: i for i in range(65)}):
    try:
        st.request_snapshot(5, "/g", state_dir=sys.argv[2], meta=bad)
        print("accepted", bad)
    except ValueError:
        pass
print("ok")
`
	out, err := exec.Command(py, "-c", prog, trainerScripts, state).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python: %v: %s", err, out)
	}
	recs := readAll(t, filepath.Join(state, "wal"), nil)
	want := mustMeta(t, `{"step": 1200, "epoch": 3, "loss": 0.41, "lr": 3e-4, "big": 1e21, "tiny": -1e-7, "f": 2.0, "ok": true,
          "none": null, "name": "run a/\u00e9\ud83d\ude00 100%", "z": -0.0, "e20": 1e20, "n": -12345678912345}`)
	if len(recs) != 2 || !recs[0].Meta.Equal(want) {
		t.Fatalf("records %+v\nwant meta %s", recs, want.JSON())
	}
	if r := recs[1]; r.Rank != 1 || r.WorldSize != 2 || !r.Meta.Equal(mustMeta(t, `{"step":1200}`)) {
		t.Fatalf("rank request with meta: %+v", r)
	}
}
