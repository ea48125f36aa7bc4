package gitops_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"github.com/snapd-ml/snapd/internal/testutil"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/snapshot"
)

// BenchmarkGitGenerations measures publishing a series of generations of a
// large snapshot in which ~1% of the rows change per generation:
//
//   - gitops.Repo.Commit + GitPusher.Push (file:// bare remote) per
//     generation, single vs split layout, of the signed WTXT;
//   - the same generations as .safetensors files, committed and pushed with
//     the git CLI (the "commit the checkpoint binary" baseline);
//   - repository growth per generation: bytes added under objects/ of the
//     local repository and of the remote (loose objects + packs, as
//     stored), next to the raw bytes of the rows that changed.
//
// It is heavy (GBs written) and runs only with SNAPD_BENCH_GIT=1:
//
//	SNAPD_BENCH_GIT=1 go test -run XXX -bench GitGenerations -benchtime 1x -timeout 2h ./gitops/
//
// Knobs (environment): SNAPD_BENCH_SIZE (raw bytes, default 256 MiB),
// SNAPD_BENCH_GENS (default 10), SNAPD_BENCH_PART_LIMIT (split part limit,
// default gitops.DefaultPartLimit), SNAPD_BENCH_ROWS_PER_CHUNK (WTXT
// rows_per_chunk, default the profile's), SNAPD_BENCH_PATTERN ("uniform":
// every row changes with probability 1%, as scripts/mkbig does; "clustered":
// one contiguous run of 1% of the rows of each matrix), SNAPD_BENCH_DIR
// (work directory, default a temp dir), SNAPD_BENCH_PACK_WINDOW (git config
// pack.window of the two local WTXT repositories, which go-git's push uses
// for its delta search; unset = go-git's default 10, 0 = no delta search).
// The per-generation lines and the summary go to stdout (testing truncates
// benchmark logs).
func BenchmarkGitGenerations(b *testing.B) {
	if os.Getenv("SNAPD_BENCH_GIT") != "1" {
		b.Skip("heavy (writes GBs): set SNAPD_BENCH_GIT=1")
	}
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("git not installed")
	}
	cfg := benchConfig{
		size:      envInt(b, "SNAPD_BENCH_SIZE", 256<<20),
		gens:      int(envInt(b, "SNAPD_BENCH_GENS", 10)),
		partLimit: envInt(b, "SNAPD_BENCH_PART_LIMIT", gitops.DefaultPartLimit),
		rpc:       int(envInt(b, "SNAPD_BENCH_ROWS_PER_CHUNK", 0)),
		pattern:   os.Getenv("SNAPD_BENCH_PATTERN"),
		window:    os.Getenv("SNAPD_BENCH_PACK_WINDOW"),
	}
	if cfg.pattern == "" {
		cfg.pattern = "uniform"
	}
	if cfg.pattern != "uniform" && cfg.pattern != "clustered" {
		b.Fatalf("SNAPD_BENCH_PATTERN=%q: want uniform or clustered", cfg.pattern)
	}
	for range b.N {
		runGitBench(b, cfg)
	}
}

type benchConfig struct {
	size, partLimit int64
	gens, rpc       int
	pattern         string
	window          string // pack.window of the local repositories ("" = go-git's default, 10)
}

func envInt(b *testing.B, k string, def int64) int64 {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", k, v)
	}
	return n
}

const benchCols = 1024 // f32 columns: 4 KiB rows

// benchModel is a synthetic checkpoint held in memory: four f32 matrices
// and eight biases, mutated in place generation by generation.
type benchModel struct {
	names []string
	data  [][]byte
	rows  []int64
}

func newBenchModel(size int64) *benchModel {
	m := &benchModel{}
	per := size / 4 / (benchCols * 4)
	for i, n := range []string{"embed", "layer0.w", "layer1.w", "head.w"} {
		d := make([]byte, per*benchCols*4)
		testutil.Fill(d, uint64(i)<<40)
		m.names, m.data, m.rows = append(m.names, n), append(m.data, d), append(m.rows, per)
	}
	for i := range 8 {
		d := make([]byte, benchCols*4)
		testutil.Fill(d, uint64(100+i)<<40)
		m.names, m.data, m.rows = append(m.names, fmt.Sprintf("bias%d", i)), append(m.data, d), append(m.rows, 1)
	}
	return m
}

// mutate changes ~1% of the matrix rows for generation g and returns the
// raw bytes changed.
func (m *benchModel) mutate(g int, pattern string) int64 {
	var changed int64
	rowBytes := int64(benchCols * 4)
	for a := range 4 {
		rows := m.rows[a]
		touch := func(r int64) {
			row := m.data[a][r*rowBytes : (r+1)*rowBytes]
			testutil.Fill(row, testutil.SplitMix(uint64(g)<<48^uint64(a)<<40^uint64(r)))
			changed += rowBytes
		}
		switch pattern {
		case "uniform":
			for r := int64(0); r < rows; r++ {
				if testutil.SplitMix(uint64(g)<<32^uint64(a)<<56^uint64(r))%100 == 0 {
					touch(r)
				}
			}
		case "clustered":
			n := max(rows/100, 1)
			start := int64(testutil.SplitMix(uint64(g)<<32^uint64(a))%uint64(rows-n+1)) / 64 * 64
			for r := start; r < start+n && r < rows; r++ {
				touch(r)
			}
		}
	}
	return changed
}

func (m *benchModel) snapshot(g int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}
	s.Meta.Gen, s.Meta.Build = uint64(g), "bench"
	s.Meta.TS = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(g) * time.Minute)
	for i, n := range m.names {
		shape := []int64{m.rows[i], benchCols}
		if m.rows[i] == 1 {
			shape = []int64{benchCols}
		}
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: n, DType: snapshot.F32, Shape: shape, Data: snapshot.Bytes(m.data[i])})
	}
	return s
}

// duObjects sums the sizes of the files under dir/objects.
func duObjects(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

func gitBench(b *testing.B, dir string, args ...string) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir,
		"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@localhost", "GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@localhost")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// sample is one generation's measurement of one way of publishing.
type sample struct {
	commit, push            time.Duration
	localGrowth, remoteGrow int64
	blobs                   int
}

type series struct {
	name    string
	samples []sample
	local   string // repository whose objects/ are measured
	remote  string
}

func (s *series) measure(b *testing.B, commit, push func() int) {
	l0, r0 := duObjects(b, s.local), duObjects(b, s.remote)
	t0 := time.Now()
	blobs := commit()
	t1 := time.Now()
	push()
	t2 := time.Now()
	s.samples = append(s.samples, sample{commit: t1.Sub(t0), push: t2.Sub(t1), localGrowth: duObjects(b, s.local) - l0, remoteGrow: duObjects(b, s.remote) - r0, blobs: blobs})
}

func runGitBench(b *testing.B, cfg benchConfig) {
	ctx := context.Background()
	work := os.Getenv("SNAPD_BENCH_DIR")
	if work == "" {
		work = b.TempDir()
	} else {
		var err error
		if work, err = os.MkdirTemp(work, "gitbench-*"); err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(work)
	}
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	model := newBenchModel(cfg.size)
	var raw int64
	for _, d := range model.data {
		raw += int64(len(d))
	}

	mk := func(name string, c gitops.Config) (*series, *gitops.Repo, *gitops.GitPusher) {
		local := filepath.Join(work, name+".git")
		remote := filepath.Join(work, name+"-remote.git")
		gitBench(b, work, "init", "-q", "--bare", remote)
		c.SigningKey = key
		r, err := gitops.OpenRepo(local, c)
		if err != nil {
			b.Fatal(err)
		}
		if cfg.window != "" {
			gitBench(b, local, "config", "pack.window", cfg.window)
		}
		p, err := gitops.NewPusher(local, gitops.Remote{URL: "file://" + remote})
		if err != nil {
			b.Fatal(err)
		}
		return &series{name: name, local: local, remote: remote}, r, p
	}
	single, singleRepo, singlePush := mk("wtxt-single", gitops.Config{Layout: gitops.LayoutSingle})
	split, splitRepo, splitPush := mk("wtxt-split", gitops.Config{Layout: gitops.LayoutSplit, PartLimit: cfg.partLimit, SplitThreshold: cfg.partLimit})

	// The safetensors baseline: a work tree committed with the git CLI.
	stWork := filepath.Join(work, "st")
	stRemote := filepath.Join(work, "st-remote.git")
	gitBench(b, work, "init", "-q", "-b", "main", stWork)
	gitBench(b, work, "init", "-q", "--bare", stRemote)
	gitBench(b, stWork, "remote", "add", "origin", "file://"+stRemote)
	st := &series{name: "safetensors-git", local: filepath.Join(stWork, ".git"), remote: stRemote}

	wtxtPath := filepath.Join(work, "gen.wtxt")
	var prev [32]byte
	var changed []int64
	var encodeTime time.Duration
	var wtxtSize int64
	for g := 1; g <= cfg.gens; g++ {
		var ch int64
		if g > 1 {
			ch = model.mutate(g, cfg.pattern)
		}
		changed = append(changed, ch)
		s := model.snapshot(g)
		f, err := os.Create(wtxtPath)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		res, err := wtxt.Encode(ctx, f, s, wtxt.EncodeOptions{SignKey: key, PrevMerkle: prev, RowsPerChunk: cfg.rpc})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatal(err)
		}
		encodeTime += time.Since(t0)
		prev, wtxtSize = res.MerkleThis, res.Written

		for _, x := range []struct {
			s *series
			r *gitops.Repo
			p *gitops.GitPusher
		}{{single, singleRepo, singlePush}, {split, splitRepo, splitPush}} {
			var cr *gitops.Result
			x.s.measure(b, func() int {
				if cr, err = x.r.Commit(ctx, gitops.Generation{WTXT: wtxtPath}); err != nil {
					b.Fatalf("%s gen %d: commit: %v", x.s.name, g, err)
				}
				return cr.BlobsWritten
			}, func() int {
				if err := x.p.Push(ctx, gitops.PushRequest{Branch: gitops.DefaultBranch, Commit: cr.Commit, Tag: cr.Tag}); err != nil {
					b.Fatalf("%s gen %d: push: %v", x.s.name, g, err)
				}
				return 0
			})
		}

		stFile := filepath.Join(stWork, "model.safetensors")
		sf, err := os.Create(stFile)
		if err != nil {
			b.Fatal(err)
		}
		if err := safetensors.New().Encode(ctx, sf, s, formats.EncodeOptions{}); err != nil {
			b.Fatal(err)
		}
		sf.Close()
		st.measure(b, func() int {
			gitBench(b, stWork, "add", "model.safetensors")
			gitBench(b, stWork, "commit", "-q", "-m", fmt.Sprintf("generation %d", g))
			return 1
		}, func() int {
			gitBench(b, stWork, "push", "-q", "origin", "main")
			return 0
		})
		logf("gen %2d: changed %.2f MiB raw; single %v+%v, split %v+%v (%d new blobs), safetensors %v+%v",
			g, mib(ch), rnd(single.samples[g-1].commit), rnd(single.samples[g-1].push),
			rnd(split.samples[g-1].commit), rnd(split.samples[g-1].push), split.samples[g-1].blobs,
			rnd(st.samples[g-1].commit), rnd(st.samples[g-1].push))
	}

	// Report.
	var changedLater int64
	for _, c := range changed[1:] {
		changedLater += c
	}
	later := int64(max(cfg.gens-1, 1))
	logf("config: raw %.1f MiB, WTXT %.1f MiB, %d generations, pattern %s, part limit %.1f MiB, rows_per_chunk %d (0 = profile default), pack.window %q, mean WTXT encode %v",
		mib(raw), mib(wtxtSize), cfg.gens, cfg.pattern, mib(cfg.partLimit), cfg.rpc, cfg.window, rnd(encodeTime/time.Duration(cfg.gens)))
	logf("changed raw bytes per generation (gens 2..%d): mean %.2f MiB", cfg.gens, mib(changedLater/later))
	logf("%-16s %12s %12s %12s %14s %14s %14s", "series", "gen1 c+p", "gen2+ commit", "gen2+ push", "gen2+ c+p", "local growth", "remote growth")
	means := map[string][3]float64{}
	for _, s := range []*series{single, split, st} {
		var c, p time.Duration
		var lg, rg int64
		for _, x := range s.samples[1:] {
			c, p, lg, rg = c+x.commit, p+x.push, lg+x.localGrowth, rg+x.remoteGrow
		}
		n := time.Duration(later)
		first := s.samples[0].commit + s.samples[0].push
		logf("%-16s %12v %12v %12v %14v %11.2f MiB %11.2f MiB", s.name, rnd(first), rnd(c/n), rnd(p/n), rnd((c+p)/n), mib(lg/later), mib(rg/later))
		means[s.name] = [3]float64{float64(first), float64((c + p) / n), float64(rg / later)}
	}
	sp, si := means["wtxt-split"], means["wtxt-single"]
	ratioTime := sp[1] / si[1]
	ratioFirst := sp[1] / sp[0]
	growth := sp[2] / float64(changedLater/later)
	logf("split gen2+ commit+push = %.1f%% of single-layout commit+push of the whole snapshot (%.1f%% of split gen 1) [target <= 10%%]", 100*ratioTime, 100*ratioFirst)
	logf("split remote growth per generation = %.2fx the changed raw bytes [target <= 3x]; single %.2fx; safetensors %.2fx",
		growth, si[2]/float64(changedLater/later), means["safetensors-git"][2]/float64(changedLater/later))
	b.ReportMetric(100*ratioTime, "split/single-%")
	b.ReportMetric(growth, "split-growth/changed")
}

// logf prints a result line to stdout (benchmark logs are truncated).
func logf(format string, a ...any) { fmt.Printf("gitbench: "+format+"\n", a...) }

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func rnd(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
