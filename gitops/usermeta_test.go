package gitops

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// A generation's metadata is committed as one Snapd-Meta trailer: read
// from the plaintext WTXT when no Header is given, from Header.Meta when
// one is, and never for an age-armored generation.
func TestCommitMetaTrailer(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r, err := OpenRepo(filepath.Join(dir, "repo.git"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	meta, err := snapshot.ParseUserMeta([]byte(`{"step":1200,"loss":0.41,"opt":"adam w"}`))
	if err != nil {
		t.Fatal(err)
	}
	var prev [32]byte
	write := func(gen uint64, m snapshot.UserMeta) string {
		s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta(), UserMeta: m, Arrays: []*snapshot.Array{
			{Name: "w", DType: snapshot.U8, Shape: []int64{4}, Data: snapshot.Bytes([]byte{1, 2, 3, byte(gen)})}}}
		s.Meta.Gen, s.Meta.TS = gen, time.Unix(1760000000+int64(gen), 0).UTC()
		var b bytes.Buffer
		res, err := wtxt.Encode(ctx, &b, s, wtxt.EncodeOptions{PrevMerkle: prev})
		if err != nil {
			t.Fatal(err)
		}
		prev = res.Root.MerkleThis
		p := filepath.Join(dir, "g.wtxt")
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	trailers := func(res *Result) map[string]string {
		c, err := r.r.CommitObject(res.Commit)
		if err != nil {
			t.Fatal(err)
		}
		return ParseTrailers(c.Message)
	}
	// Read from the WTXT.
	res, err := r.Commit(ctx, Generation{WTXT: write(1, meta)})
	if err != nil {
		t.Fatal(err)
	}
	tr := trailers(res)
	if got, want := tr[TrailerMeta], `loss=0.41 opt="adam w" step=1200`; got != want {
		t.Fatalf("trailer %q, want %q", got, want)
	}
	if m, err := MetaOfTrailers(tr); err != nil || !m.Equal(meta) {
		t.Fatalf("read back %v %v", m, err)
	}
	// From the Header (the daemon's).
	p := write(2, nil)
	f, _ := os.Open(p)
	h, err := ParseHeader(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	h.Meta = meta[:1]
	res, err = r.Commit(ctx, Generation{WTXT: p, Header: h})
	if err != nil {
		t.Fatal(err)
	}
	if got := trailers(res)[TrailerMeta]; got != "loss=0.41" {
		t.Fatalf("trailer from the header %q", got)
	}
	// None without metadata.
	res, err = r.Commit(ctx, Generation{WTXT: write(3, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := trailers(res)[TrailerMeta]; ok {
		t.Fatal("a trailer without metadata")
	}
	if m, err := MetaOfTrailers(trailers(res)); m != nil || err != nil {
		t.Fatalf("no trailer: %v %v", m, err)
	}
	// An armored generation keeps it inside.
	hs := &Header{Meta: meta}
	if err := settleMeta(ctx, Generation{Seal: "g.wseal", Header: hs}, hs); err != nil || hs.Meta != nil {
		t.Fatalf("armored: %v %v", hs.Meta, err)
	}
	if _, err := MetaOfTrailers(map[string]string{TrailerMeta: "step=1.0"}); err == nil || !strings.Contains(err.Error(), TrailerMeta) {
		t.Fatalf("malformed trailer: %v", err)
	}
}
