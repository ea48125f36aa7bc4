package verify

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// BenchmarkVerifyLayouts: Verify (snapd verify-repo) of the same three
// signed, chained generations — SNAPD_BENCH_VERIFY_MIB MiB of f32 each
// (default 64), 1% of the rows changed per generation in one cluster —
// committed as split parts and as segments; the throughput is WTXT bytes
// verified per second. Compare the two in the same run:
//
//	go test -run XXX -bench VerifyLayouts -benchtime 3x ./gitops/verify/
//
// SNAPD_BENCH_VERIFY_KEEP=DIR (an empty directory) keeps the repositories
// DIR/split.git and DIR/segments.git and DIR/allowed_signers.
func BenchmarkVerifyLayouts(b *testing.B) {
	mib := 64
	if s := os.Getenv("SNAPD_BENCH_VERIFY_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("SNAPD_BENCH_VERIFY_MIB=%q", s)
		}
		mib = n
	}
	const cols = 1024
	rows := int64(mib) << 20 / (cols * 4)
	data := make([]byte, rows*cols*4)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(data); i += 4 {
		binary.LittleEndian.PutUint32(data[i:], rng.Uint32())
	}
	key := verifytest.NewKey(b)
	dir := b.TempDir()
	if keep := os.Getenv("SNAPD_BENCH_VERIFY_KEEP"); keep != "" {
		// Keep the repositories (and allowed_signers) for snapd verify-repo
		// under /usr/bin/time -v.
		dir = keep
		signers, err := os.ReadFile(key.AllowedSigners)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "allowed_signers"), signers, 0o644)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	var files []string
	var total int64
	var prev [32]byte
	for g := uint64(1); g <= 3; g++ {
		if g > 1 { // one cluster of 1% of the rows
			start := int64(g*7919) % (rows - rows/100)
			for r := start; r < start+rows/100; r++ {
				for c := int64(0); c < cols; c++ {
					binary.LittleEndian.PutUint32(data[(r*cols+c)*4:], rng.Uint32())
				}
			}
		}
		s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}
		s.Meta.Gen, s.Meta.Build = g, "bench"
		s.Meta.TS = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(g) * time.Hour)
		s.Arrays = []*snapshot.Array{{Name: "w", DType: snapshot.F32, Shape: []int64{rows, cols}, Data: snapshot.Bytes(data)}}
		p := filepath.Join(dir, "g"+strconv.FormatUint(g, 10)+".wtxt")
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		res, err := wtxt.Encode(context.Background(), bw, s, wtxt.EncodeOptions{SignKey: key.Priv, PrevMerkle: prev})
		if err == nil {
			err = bw.Flush()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatal(err)
		}
		prev = res.MerkleThis
		st, _ := os.Stat(p)
		total += st.Size()
		files = append(files, p)
	}
	for _, layout := range []gitops.Layout{gitops.LayoutSplit, gitops.LayoutSegments} {
		repoDir := filepath.Join(dir, string(layout)+".git")
		r, err := gitops.OpenRepo(repoDir, gitops.Config{Layout: layout, SigningKey: key.Priv})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range files {
			if res, err := r.Commit(context.Background(), gitops.Generation{WTXT: p}); err != nil || res.Layout != layout {
				b.Fatalf("commit %s: %+v %v", p, res, err)
			}
		}
		b.Run(string(layout), func(b *testing.B) {
			repo, err := git.PlainOpen(repoDir)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(total)
			for b.Loop() {
				rep, err := Verify(context.Background(), repo, Options{TrustedKeys: []ed25519.PublicKey{key.Pub}, TempDir: b.TempDir()})
				if err != nil || !rep.OK || len(rep.Generations) != 3 {
					b.Fatalf("verify: %v\n%s", err, dump(rep))
				}
			}
		})
	}
}
