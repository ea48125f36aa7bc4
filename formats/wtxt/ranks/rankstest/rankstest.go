// Package rankstest holds the rank-part fixtures the tests of the
// registry client (gitops/layout/oci) and of the daemon's rank stages
// (pipeline) share: a job's chain id, keys, a rank's shard and its
// encoded, split part. (The ranks package's own tests keep their copy: an
// internal test cannot import this package without a cycle.)
package rankstest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/snapshot"
)

// Chain is the chain id of the test job "test-job".
var Chain = wranks.ChainID("test-job")

// Key returns the Ed25519 key derived from 32 bytes of seed.
func Key(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, 32))
}

// Shard returns rank r's shard of generation gen: two f32 arrays whose
// values depend on gen and r.
func Shard(gen uint64, r int) *snapshot.Snapshot {
	mk := func(name string, rows, cols int64, salt uint32) *snapshot.Array {
		b := make([]byte, rows*cols*4)
		for i := range rows * cols {
			binary.LittleEndian.PutUint32(b[i*4:], uint32(gen)*1000+uint32(r)*100+uint32(i)+salt)
		}
		return &snapshot.Array{Name: name, DType: snapshot.F32, Shape: []int64{rows, cols}, Data: snapshot.Bytes(b)}
	}
	m := snapshot.DefaultMeta()
	m.TS = time.Date(2026, 11, 24, 7, 0, int(gen)%60, 0, time.UTC)
	m.Build = "test"
	return &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{
		mk(fmt.Sprintf("layers.%d.w", r), 64, 16, 0),
		mk(fmt.Sprintf("layers.%d.b", r), 1, 16, 7),
	}}
}

// Part encodes rank r of gen, splits it, and returns its WTXT, its
// skeleton and its Part.
func Part(t testing.TB, gen uint64, r int, chain [32]byte, key ed25519.PrivateKey) (wt, skel []byte, p wranks.Part) {
	t.Helper()
	var w bytes.Buffer
	if _, err := wranks.EncodePart(context.Background(), &w, Shard(gen, r), wranks.PartOptions{Gen: gen, Chain: chain, SignKey: key}); err != nil {
		t.Fatal(err)
	}
	var sk bytes.Buffer
	if _, err := wtxt.Split(context.Background(), bytes.NewReader(w.Bytes()), &sk, func(context.Context, wtxt.Segment, []byte) error { return nil }, wtxt.SplitOptions{SegmentSize: 1024}); err != nil {
		t.Fatal(err)
	}
	h, err := wranks.SkeletonHeader(sk.Bytes(), "skel")
	if err != nil {
		t.Fatal(err)
	}
	p = wranks.PartFromHeader(r, h)
	p.Skeleton = wranks.SkeletonName(r)
	p.SkeletonSHA256 = sha256.Sum256(sk.Bytes())
	p.Manifest = fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(fmt.Sprint("manifest", gen, r))))
	return w.Bytes(), sk.Bytes(), p
}

// WantCheck fails t unless err is a ranks *wtxt.Error of check about rank
// (-1: none) that wraps wranks.ErrInvalid.
func WantCheck(t testing.TB, err error, check wtxt.Check, rank int) {
	t.Helper()
	var e *wtxt.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *wtxt.Error with check %s, got %v", check, err)
	}
	got := -1
	if e.Rank != nil {
		got = *e.Rank
	}
	if e.Check != check || got != rank {
		t.Fatalf("want check %s rank %d, got check %s rank %d (%v)", check, rank, e.Check, got, err)
	}
	if !errors.Is(err, wranks.ErrInvalid) {
		t.Fatalf("%v does not wrap ErrInvalid", err)
	}
}
