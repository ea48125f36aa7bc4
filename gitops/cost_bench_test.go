package gitops_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"fmt"
	"github.com/snapd-ml/snapd/internal/testutil"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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

// BenchmarkGitCost measures, per generation of the scripts/benchgen model
// (the one scripts/bench-git.sh feeds the daemon), the CPU of exactly the
// Git work of the segments layout beside the CPU of the conversion, in
// one process and one run:
//
//   - convert: decode the generation's safetensors and wtxt.Encode it
//     (signed, HMAC, chained) to a file, as the daemon's encode stage does;
//   - commit: gitops.Repo.Commit (split into pieces and segments, loose
//     objects, trees, signed commit and tag);
//   - push: GitPusher.Push to a file:// bare remote: this process's
//     CPU plus every git child's (ls-remote, rev-list, push with its
//     pack-objects, and the remote's receive-pack with index-pack or
//     unpack-objects, which for a local remote run here).
//
// CPU is user+sys from getrusage: RUSAGE_SELF deltas for the Go work,
// RUSAGE_CHILDREN deltas for the git children. Each git command is also
// run through a wrapper (/usr/bin/time) that records its own CPU with
// that of its waited-for descendants, so the push splits into ls-remote,
// rev-list, the sending side (git push with pack-objects) and the
// receiving side (receive-pack with index-pack/unpack-objects).
//
// It is heavy and runs only with SNAPD_BENCH_GITCOST=1:
//
//	SNAPD_BENCH_GITCOST=1 go test -run XXX -bench GitCost -benchtime 1x -timeout 2h ./gitops/
//
// Knobs (environment): SNAPD_BENCH_SIZE (raw bytes, default 52428800),
// SNAPD_BENCH_GENS (default 10), SNAPD_BENCH_PATTERN (clustered, the
// default, or uniform), SNAPD_BENCH_CHANGE (percent of rows per
// generation, default 1), SNAPD_BENCH_ROWS_PER_CHUNK (WTXT
// rows_per_chunk, default the profile's), SNAPD_BENCH_SEGMENT (the
// segments layout's segment size, default gitops.DefaultSegmentSize),
// SNAPD_BENCH_DIR (work directory, default a temp dir; with
// SNAPD_BENCH_KEEP=1 the repositories are left there). Add
// -cpuprofile FILE to see where the Go side of the Git work goes
// (go tool pprof -top -focus 'gitops\.\(\*Repo\)\.Commit' FILE). Results
// go to stdout, one line per generation and a summary; the metrics
// git/convert-cpu (gens 2..N) and growth/changed are reported.
func BenchmarkGitCost(b *testing.B) {
	if os.Getenv("SNAPD_BENCH_GITCOST") != "1" {
		b.Skip("heavy: set SNAPD_BENCH_GITCOST=1")
	}
	for _, tool := range []string{"git", "go", "/usr/bin/time"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s not installed", tool)
		}
	}
	cfg := costConfig{
		size:    envInt(b, "SNAPD_BENCH_SIZE", 52428800),
		gens:    int(envInt(b, "SNAPD_BENCH_GENS", 10)),
		change:  os.Getenv("SNAPD_BENCH_CHANGE"),
		pattern: os.Getenv("SNAPD_BENCH_PATTERN"),
		rpc:     int(envInt(b, "SNAPD_BENCH_ROWS_PER_CHUNK", 0)),
		segment: envInt(b, "SNAPD_BENCH_SEGMENT", gitops.DefaultSegmentSize),
	}
	if os.Getenv("SNAPD_BENCH_PIECE") == "off" {
		cfg.piece = -1
	} else {
		cfg.piece = envInt(b, "SNAPD_BENCH_PIECE", gitops.DefaultSegmentPiece)
	}
	if cfg.pattern == "" {
		cfg.pattern = "clustered"
	}
	if cfg.change == "" {
		cfg.change = "1"
	}
	if cfg.pattern != "uniform" && cfg.pattern != "clustered" {
		b.Fatalf("SNAPD_BENCH_PATTERN=%q: want uniform or clustered", cfg.pattern)
	}
	if _, err := strconv.ParseFloat(cfg.change, 64); err != nil {
		b.Fatalf("SNAPD_BENCH_CHANGE=%q: %v", cfg.change, err)
	}
	for range b.N {
		runCostBench(b, cfg)
	}
}

type costConfig struct {
	size, segment   int64
	piece           int64 // Config.SegmentPiece (-1: one blob per segment)
	gens, rpc       int
	change, pattern string
}

// costSample is one generation's measurement.
type costSample struct {
	convert, commit, pushSelf, pushChildren time.Duration
	ops                                     map[string]time.Duration // git subcommand -> CPU (wrapper)
	changed, growth                         int64
	blobs                                   int
}

func (s costSample) git() time.Duration { return s.commit + s.pushSelf + s.pushChildren }

// readOpCPU parses the wrapper's log (one "<subcommand> <user> <sys>" line
// per git run) and empties it.
func readOpCPU(b *testing.B, log string) map[string]time.Duration {
	f, err := os.Open(log)
	if err != nil {
		b.Fatal(err)
	}
	ops := map[string]time.Duration{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			continue // time's own notes ("Command exited with non-zero status")
		}
		u, err1 := strconv.ParseFloat(fs[1], 64)
		s, err2 := strconv.ParseFloat(fs[2], 64)
		if err1 != nil || err2 != nil {
			b.Fatalf("wrapper log line %q", sc.Text())
		}
		ops[fs[0]] += time.Duration((u + s) * float64(time.Second))
	}
	f.Close()
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(log, 0); err != nil {
		b.Fatal(err)
	}
	return ops
}

func runCostBench(b *testing.B, cfg costConfig) {
	ctx := context.Background()
	work := os.Getenv("SNAPD_BENCH_DIR")
	if work == "" {
		work = b.TempDir()
	} else {
		var err error
		if work, err = os.MkdirTemp(work, "gitcost-*"); err != nil {
			b.Fatal(err)
		}
		if os.Getenv("SNAPD_BENCH_KEEP") == "1" {
			logf("gitcost: work directory kept: %s", work)
		} else {
			defer os.RemoveAll(work)
		}
	}
	gen := filepath.Join(work, "benchgen")
	build := exec.Command("go", "build", "-o", gen, "../scripts/benchgen")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build benchgen: %v\n%s", err, out)
	}
	gitPath, err := exec.LookPath("git")
	if err != nil {
		b.Fatal(err)
	}
	// The wrapper: every git run by the pusher, the remote's receive-pack
	// included (GitPusher passes Remote.Git to --receive-pack), records
	// its first non-option argument and its CPU with its children's.
	opLog := filepath.Join(work, "git-cpu.log")
	wrapper := filepath.Join(work, "git-timed")
	script := fmt.Sprintf(`#!/bin/sh
op=; skip=
for a in "$@"; do
  if [ -n "$skip" ]; then skip=; continue; fi
  case "$a" in
  -c|--git-dir) skip=1 ;;
  -*) ;;
  *) op=$a; break ;;
  esac
done
exec /usr/bin/time -a -o %s -f "$op %%U %%S" %s "$@"
`, opLog, gitPath)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(opLog, nil, 0o644); err != nil {
		b.Fatal(err)
	}

	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	hmacKey := make([]byte, 32)
	local := filepath.Join(work, "local.git")
	remote := filepath.Join(work, "remote.git")
	gitBench(b, work, "init", "-q", "--bare", remote)
	repo, err := gitops.OpenRepo(local, gitops.Config{Layout: gitops.LayoutSegments, SegmentSize: cfg.segment, SegmentPiece: cfg.piece, SigningKey: key})
	if err != nil {
		b.Fatal(err)
	}
	pusher, err := gitops.NewPusher(local, gitops.Remote{URL: "file://" + remote, Git: wrapper})
	if err != nil {
		b.Fatal(err)
	}
	genArgs := func(g int) []string {
		return []string{"-size", strconv.FormatInt(cfg.size, 10), "-pattern", cfg.pattern, "-change", cfg.change, "-gen", strconv.Itoa(g)}
	}
	var prev [32]byte
	var samples []costSample
	src := filepath.Join(work, "gen.safetensors")
	wtxtPath := filepath.Join(work, "gen.wtxt")
	var wtxtSize int64
	for g := 1; g <= cfg.gens; g++ {
		var s costSample
		if out, err := exec.Command(gen, append(genArgs(g), src)...).CombinedOutput(); err != nil {
			b.Fatalf("benchgen gen %d: %v\n%s", g, err, out)
		}
		out, err := exec.Command(gen, append(genArgs(g), "-report")...).Output()
		if err != nil {
			b.Fatalf("benchgen -report gen %d: %v", g, err)
		}
		if s.changed, err = strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err != nil {
			b.Fatalf("benchgen -report: %q", out)
		}

		// The conversion.
		c0, _ := testutil.CPUTime(b)
		sf, err := os.Open(src)
		if err != nil {
			b.Fatal(err)
		}
		st, err := sf.Stat()
		if err != nil {
			b.Fatal(err)
		}
		snap, err := safetensors.New().Decode(ctx, sf, st.Size(), formats.DecodeOptions{Name: src})
		if err != nil {
			b.Fatal(err)
		}
		snap.Meta = snapshot.DefaultMeta()
		snap.Meta.Gen, snap.Meta.Build = uint64(g), "bench"
		snap.Meta.TS = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(g) * time.Minute)
		wf, err := os.Create(wtxtPath)
		if err != nil {
			b.Fatal(err)
		}
		res, err := wtxt.Encode(ctx, wf, snap, wtxt.EncodeOptions{SignKey: key, HMACKey: hmacKey, PrevMerkle: prev, RowsPerChunk: cfg.rpc})
		if cerr := wf.Close(); err == nil {
			err = cerr
		}
		sf.Close()
		if err != nil {
			b.Fatal(err)
		}
		prev, wtxtSize = res.MerkleThis, res.Written
		c1, _ := testutil.CPUTime(b)
		s.convert = c1 - c0

		// The Git work.
		r0 := duObjects(b, remote)
		c0, k0 := testutil.CPUTime(b)
		cr, err := repo.Commit(ctx, gitops.Generation{WTXT: wtxtPath})
		if err != nil {
			b.Fatalf("gen %d: commit: %v", g, err)
		}
		c1, k1 := testutil.CPUTime(b)
		if err := pusher.Push(ctx, gitops.PushRequest{Branch: gitops.DefaultBranch, Commit: cr.Commit, Tag: cr.Tag}); err != nil {
			b.Fatalf("gen %d: push: %v", g, err)
		}
		c2, k2 := testutil.CPUTime(b)
		s.commit = c1 - c0 + k1 - k0
		s.pushSelf, s.pushChildren = c2-c1, k2-k1
		s.growth = duObjects(b, remote) - r0
		s.blobs = cr.BlobsWritten
		s.ops = readOpCPU(b, opLog)
		samples = append(samples, s)
		logf("gitcost gen %2d: changed %.2f MiB; convert %.3fs; git %.3fs = commit %.3fs (%d new blobs) + push %.3fs here + %.3fs children [%s]; git/convert %.2f; remote +%.2f MiB = %.2fx changed",
			g, mib(s.changed), s.convert.Seconds(), s.git().Seconds(), s.commit.Seconds(), s.blobs, s.pushSelf.Seconds(), s.pushChildren.Seconds(),
			opsString(s.ops), s.git().Seconds()/s.convert.Seconds(), mib(s.growth), float64(s.growth)/float64(max(s.changed, 1)))
	}
	if len(samples) < 2 {
		return
	}
	var sum costSample
	sum.ops = map[string]time.Duration{}
	for _, s := range samples[1:] {
		sum.convert += s.convert
		sum.commit += s.commit
		sum.pushSelf += s.pushSelf
		sum.pushChildren += s.pushChildren
		sum.changed += s.changed
		sum.growth += s.growth
		for k, v := range s.ops {
			sum.ops[k] += v
		}
	}
	n := float64(len(samples) - 1)
	ratio := sum.git().Seconds() / sum.convert.Seconds()
	growth := float64(sum.growth) / float64(max(sum.changed, 1))
	logf("gitcost: raw %.1f MiB, WTXT %.1f MiB, %s %s%%, rows_per_chunk %d (0 = default), segment %d B, piece %d B (-1 = off), gens %d",
		mib(cfg.size), mib(wtxtSize), cfg.pattern, cfg.change, cfg.rpc, cfg.segment, cfg.piece, cfg.gens)
	logf("gitcost gens 2..%d, mean per gen: convert %.3fs; git %.3fs = commit %.3fs + push %.3fs here + %.3fs children [%s]",
		cfg.gens, sum.convert.Seconds()/n, sum.git().Seconds()/n, sum.commit.Seconds()/n, sum.pushSelf.Seconds()/n, sum.pushChildren.Seconds()/n, opsStringScaled(sum.ops, n))
	logf("gitcost: git/convert CPU = %.2f [target <= 1]; remote growth = %.2fx the changed raw bytes (%.2f of %.2f MiB per gen)",
		ratio, growth, mib(sum.growth)/n, mib(sum.changed)/n)
	b.ReportMetric(ratio, "git/convert-cpu")
	b.ReportMetric(growth, "growth/changed")
}

func opsString(ops map[string]time.Duration) string { return opsStringScaled(ops, 1) }

// opsStringScaled lists the git subcommands' CPU, divided by n, in a fixed
// order. "push" includes its descendants: pack-objects and, for a local
// remote, "receive-pack" (with index-pack or unpack-objects), which is
// also listed on its own.
func opsStringScaled(ops map[string]time.Duration, n float64) string {
	var parts []string
	for _, k := range []string{"ls-remote", "upload-pack", "rev-list", "push", "receive-pack"} {
		if v, ok := ops[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.3fs", k, v.Seconds()/n))
		}
	}
	var other []string
	for k := range ops {
		switch k {
		case "ls-remote", "upload-pack", "rev-list", "push", "receive-pack":
		default:
			other = append(other, k)
		}
	}
	sort.Strings(other)
	for _, k := range other {
		parts = append(parts, fmt.Sprintf("%s %.3fs", k, ops[k].Seconds()/n))
	}
	return strings.Join(parts, ", ")
}
