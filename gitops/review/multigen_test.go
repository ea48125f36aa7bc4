package review

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestMultiGenerationPRIsNotABrokenChain: a PR whose head is two
// generations past its base cannot prove the chain from two files; it
// must say so instead of requesting changes for a "broken chain".
func TestMultiGenerationPRIsNotABrokenChain(t *testing.T) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{5}, 32))
	dir := t.TempDir()
	var prev [32]byte
	paths := map[uint64]string{}
	for gen := uint64(1); gen <= 3; gen++ {
		data := make([]byte, 64*16)
		data[gen] = byte(gen)
		s := &snapshot.Snapshot{Meta: snapshot.Meta{Schema: "weights/v1", Gen: gen, TS: time.Unix(1700000000, 0).UTC(), Build: "t", Host: "cpu", Cuda: "off"},
			Arrays: []*snapshot.Array{{Name: "W", DType: snapshot.F32, Shape: []int64{16, 16}, Data: snapshot.Bytes(data)}}}
		var buf bytes.Buffer
		res, err := wtxt.Encode(context.Background(), &buf, s, wtxt.EncodeOptions{SignKey: key, PrevMerkle: prev})
		if err != nil {
			t.Fatal(err)
		}
		prev = res.MerkleThis
		paths[gen] = filepath.Join(dir, "g"+string(rune('0'+gen))+".wtxt")
		os.WriteFile(paths[gen], buf.Bytes(), 0o644)
	}
	opts := Options{TrustedKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, RequireSignature: true}
	rv, err := Build(context.Background(), []FileInput{{Path: "snapshots/current.wtxt", Base: paths[1], Head: paths[3]}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rv.Event == EventRequestChanges {
		t.Fatalf("a valid two-generation PR requests changes:\n%s", rv.Body)
	}
	if !strings.Contains(rv.Body, "verify-repo") {
		t.Fatalf("the review does not say where the chain is checked:\n%s", rv.Body)
	}
	// A real break between neighbours is still caught: gen 2 re-made with
	// a zero merkle_prev does not continue gen 1.
	data := make([]byte, 64*16)
	s := &snapshot.Snapshot{Meta: snapshot.Meta{Schema: "weights/v1", Gen: 2, TS: time.Unix(1700000000, 0).UTC(), Build: "t", Host: "cpu", Cuda: "off"},
		Arrays: []*snapshot.Array{{Name: "W", DType: snapshot.F32, Shape: []int64{16, 16}, Data: snapshot.Bytes(data)}}}
	var buf bytes.Buffer
	if _, err := wtxt.Encode(context.Background(), &buf, s, wtxt.EncodeOptions{SignKey: key}); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.wtxt")
	os.WriteFile(broken, buf.Bytes(), 0o644)
	rv, err = Build(context.Background(), []FileInput{{Path: "snapshots/current.wtxt", Base: paths[1], Head: broken}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rv.Event != EventRequestChanges {
		t.Fatalf("a broken link between neighbours gives %s", rv.Event)
	}
}
