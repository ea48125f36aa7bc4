package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

type demoOptions struct {
	dir  string
	gens int
}

func newDemoCommand(e *env) *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run snapd end to end on a synthetic training job (no config, no network)",
		Long: `demo shows what snapd does, in a few seconds, with nothing but defaults:
it generates keys, starts the daemon in-process (as "snapd run" does), runs a
synthetic "trainer" that publishes generations in two formats (safetensors
and zTensor; generation 3 by the real torch.save when python3 can import
torch) with a few rows changing each step and requests a snapshot of
each through the WAL. The daemon turns each into a signed, HMAC'd,
Merkle-chained WTXT snapshot with a DELTA v2 against the previous generation,
keeps them in its ring and commits them to a local Git repository. The demo
then verifies everything with the public key and prints a row-blocked diff
of the last step.

Files go to --dir (kept) or to a temporary directory (removed at the end).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd.Context(), e, &o)
		},
	}
	cmd.Flags().StringVar(&o.dir, "dir", "", "keep the demo's files in this directory")
	cmd.Flags().IntVar(&o.gens, "gens", 5, "generations to publish")
	return cmd
}

// demoModel is the synthetic trainer's state: a few matrices whose rows
// drift a little each step.
type demoModel struct {
	rng    *rand.Rand
	arrays map[string][]float32
	shapes map[string][]int64
	step   int64
}

func newDemoModel() *demoModel {
	m := &demoModel{rng: rand.New(rand.NewPCG(42, 1)), arrays: map[string][]float32{}, shapes: map[string][]int64{}}
	// A fixed order (not a map's): the same model, draw for draw, every run.
	for _, a := range []struct {
		name  string
		shape []int64
	}{{"embed.weight", []int64{4096, 64}}, {"head.weight", []int64{256, 1024}}, {"layer0.attn.b", []int64{256}}, {"layer0.attn.w", []int64{1024, 256}}} {
		name, shape := a.name, a.shape
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(m.rng.NormFloat64() * 0.02)
		}
		m.arrays[name], m.shapes[name] = v, shape
	}
	return m
}

// train changes a few rows of some arrays, as an optimizer step with
// sparse updates (e.g. embeddings of the tokens seen) would.
func (m *demoModel) train() {
	m.step++
	for _, name := range []string{"embed.weight", "layer0.attn.w"} {
		shape := m.shapes[name]
		row := shape[1]
		for range 3 {
			r := m.rng.Int64N(shape[0])
			for j := r * row; j < (r+1)*row; j++ {
				m.arrays[name][j] += float32(m.rng.NormFloat64() * 1e-3)
			}
		}
	}
}

func (m *demoModel) snapshot() *snapshot.Snapshot {
	s := &snapshot.Snapshot{}
	for _, name := range slices.Sorted(maps.Keys(m.arrays)) {
		v := m.arrays[name]
		b := make([]byte, 4*len(v))
		for i, x := range v {
			u := math.Float32bits(x)
			b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: name, DType: snapshot.F32, Shape: m.shapes[name], Data: snapshot.Bytes(b)})
	}
	st := make([]byte, 8)
	for i := range 8 {
		st[i] = byte(m.step >> (8 * i))
	}
	s.Arrays = append(s.Arrays, &snapshot.Array{Name: "step", DType: snapshot.I64, Data: snapshot.Bytes(st)})
	return s
}

func runDemo(ctx context.Context, e *env, o *demoOptions) error {
	if o.gens < 2 {
		return usageError{fmt.Errorf("--gens %d: need at least 2", o.gens)}
	}
	// The files are kept (the printed commands name them): in --dir, or
	// in a new temporary directory the demo prints.
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "snapd-demo-")
		if err != nil {
			return ioError{err}
		}
		dir = d
	}
	w := e.stdout
	k, err := keys.Generate(filepath.Join(dir, pipeline.KeysDir))
	if err != nil {
		return ioError{err}
	}
	signer, err := keys.LoadSigner(k.SignKey)
	if err != nil {
		return err
	}
	hmacKey, err := keys.LoadHMACKey(k.HMACKey)
	if err != nil {
		return err
	}
	pubs := []ed25519.PublicKey{k.PublicKey}
	signers, err := sshsig.WriteAllowedSigners(k.Dir, defaultPrincipal(), k.PublicKey)
	if err != nil {
		return ioError{err}
	}
	fmt.Fprintf(w, "snapd demo in %s\nkeys: %s (keyid %s)\n", dir, k.Dir, keys.KeyID(k.PublicKey))

	// The daemon, in-process, exactly as `snapd run --state-dir DIR` wires
	// it (minus the metrics endpoint and the push queue: no network).
	reg := newRegistry()
	repo, err := gitops.OpenRepo(filepath.Join(dir, pipeline.RepoDir), gitops.Config{SigningKey: signer})
	if err != nil {
		return err
	}
	d, err := pipeline.New(pipeline.Config{StateDir: dir, SignKey: signer, HMACKey: hmacKey, Build: "demo",
		PollInterval: 50 * time.Millisecond, Policy: pipeline.PolicyBlock, RingKeep: o.gens},
		pipeline.Deps{Registry: reg, Logger: e.logger, Repo: repo, Now: e.now})
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		d.Close(context.Background())
		return err
	}
	defer d.Close(context.Background())
	fmt.Fprintf(w, "daemon: started in-process on state dir %s (wal/, gens/, ring/, state, repo/)\n\n", dir)

	// The synthetic trainer: publish each generation in the format it
	// writes, then append one request line to the WAL and carry on.
	store, err := snapshot.OpenGenStore(filepath.Join(dir, pipeline.GensDir))
	if err != nil {
		return ioError{err}
	}
	walw, err := wal.OpenWriter(filepath.Join(dir, pipeline.WALDir))
	if err != nil {
		return ioError{err}
	}
	defer walw.Close()
	model := newDemoModel()
	formatOf := map[uint64]string{}
	// Generation 3 is written by the real PyTorch (torch.save) when a
	// python3 with torch is installed.
	py, why := findTorchPython(ctx)
	if py == "" {
		fmt.Fprintf(w, "note: no PyTorch generation (%s)\n", why)
	}
	for gen := uint64(1); gen <= uint64(o.gens); gen++ {
		if gen > 1 {
			model.train()
		}
		fmtName, ext := "safetensors", ".safetensors"
		if gen%2 == 0 {
			fmtName, ext = "ztensor", ".zt"
		}
		if gen == 3 && py != "" {
			fmtName, ext = "torch", ".pt"
		}
		codec, err := reg.ByName(fmtName)
		if err != nil {
			return err
		}
		snap := model.snapshot()
		write := func(f io.Writer) error { return codec.Encode(ctx, f, snap, formats.EncodeOptions{}) }
		if fmtName == "torch" {
			write = func(f io.Writer) error { return torchSave(ctx, py, dir, codec, snap, f) }
		}
		g, err := store.Publish(gen, ext, write)
		if err != nil {
			return ioError{err}
		}
		formatOf[gen] = fmtName
		// What a trainer attaches (request_snapshot(meta=...)): stored and
		// signed inside the generation, shown by log, status and diff.
		meta, err := snapshot.ParseUserMeta([]byte(fmt.Sprintf(`{"step":%d,"loss":%.4f}`, model.step, 2.0/float64(gen+1))))
		if err != nil {
			return err
		}
		if err := walw.Append(wal.Request{Gen: gen, Time: e.now(), Requester: "demo-trainer", Source: g.Path, Meta: meta}); err != nil {
			return ioError{err}
		}
	}
	fmt.Fprintf(w, "trainer: published %d generations into %s and requested a snapshot of each through %s\n\n",
		o.gens, store.Dir(), filepath.Join(dir, pipeline.WALDir))

	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "gen\tpublished as\tsource bytes\tWTXT bytes\tdelta bytes\tchunks changed\tmerkle_this\tlatency\tverify\t")
	var prevMerkle *[32]byte
	var results []*pipeline.GenResult
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for gen := uint64(1); gen <= uint64(o.gens); gen++ {
		r, err := d.Wait(wctx, gen)
		if err != nil {
			return fmt.Errorf("waiting for generation %d: %w", gen, err)
		}
		if r.Error != "" {
			return fmt.Errorf("generation %d: %s", gen, r.Error)
		}
		results = append(results, r)
		deltaCol, changedCol := "-", "-"
		if r.Delta != "" {
			deltaCol = fmt.Sprintf("%d (%.1f%%)", r.DeltaBytes, 100*float64(r.DeltaBytes)/float64(r.WTXTBytes))
			changedCol = fmt.Sprintf("%d/%d", r.DeltaChanged, r.DeltaChunks)
		}
		status := "OK (signature, HMAC, chain)"
		f, err := os.Open(r.WTXT)
		if err != nil {
			return ioError{err}
		}
		_, verr := wtxt.Verify(ctx, f, wtxt.VerifyOptions{File: r.WTXT, TrustedKeys: pubs, HMACKey: hmacKey, PrevMerkle: prevMerkle, RequireSignature: true})
		f.Close()
		if verr != nil {
			status = "FAILED: " + verr.Error()
		}
		var mt [32]byte
		hex.Decode(mt[:], []byte(r.MerkleThis))
		prevMerkle = &mt
		fmt.Fprintf(tw, "%06d\t%s\t%d\t%d\t%s\t%s\t%s…\t%s\t%s\t\n", gen, formatOf[gen], r.SourceBytes, r.WTXTBytes, deltaCol, changedCol,
			r.MerkleThis[:16], r.Latency.Round(time.Millisecond), status)
	}
	tw.Flush()

	head := d.Head()
	last, prev := results[len(results)-1], results[len(results)-2]
	fmt.Fprintf(w, "\nchain head (STATE_DIR/state): gen %s merkle_this %s…, chained to gen %d\n", head.GenText, head.MerkleThis[:16], head.PrevGen)
	if last.Commit != "" {
		fmt.Fprintf(w, "git: %d signed commits on branch %s in %s (tag %s = %s)\n", len(results), repo.Config().Branch, repo.Dir(), last.Tag, last.Commit[:12])
	}
	// The row-blocked diff of the last step, read back from the ring.
	var snaps [2]*snapshot.Snapshot
	for i, r := range []*pipeline.GenResult{prev, last} {
		b, err := os.ReadFile(r.WTXT)
		if err != nil {
			return ioError{err}
		}
		if snaps[i], err = wtxt.New().Decode(ctx, bytes.NewReader(b), int64(len(b)), formats.DecodeOptions{Name: r.WTXT}); err != nil {
			return err
		}
	}
	ds, err := snapshot.Diff(ctx, snaps[0], snaps[1], snapshot.DiffOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nWhat changed from generation %06d to %06d (row-blocked diff):\n", prev.Gen, last.Gen)
	writeMetaChanges(indent{w}, snapshot.DiffUserMeta(snaps[0].UserMeta, snaps[1].UserMeta))
	writeDiffText(indent{w}, ds)
	fmt.Fprintf(w, "\nEvery generation is chained to the previous one (merkle_prev = previous merkle_this) and\nsigned; verify one yourself with:\n  snapd verify %s --pubkey %s --hmac-key %s --prev %s --require-signature\n",
		shellQuote(last.WTXT), shellQuote(signers), shellQuote(k.HMACKey), shellQuote(prev.WTXT))
	if last.Commit != "" {
		fmt.Fprintf(w, "check the Git commit's SSH signature with:\n  git -C %s -c gpg.ssh.allowedSignersFile=%s verify-commit %s\n",
			shellQuote(repo.Dir()), shellQuote(signers), last.Commit)
	}
	fmt.Fprintf(w, "and see the daemon's view and the generations with their metadata with:\n  snapd status --state-dir %s\n  snapd log --state-dir %s\n", shellQuote(dir), shellQuote(dir))
	if o.dir == "" {
		fmt.Fprintf(w, "(files kept in %s; remove them with: rm -rf %s)\n", dir, shellQuote(dir))
	}
	return nil
}

// indent prefixes every line written with two spaces.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	lines := bytes.SplitAfter(p, []byte("\n"))
	for _, l := range lines {
		if len(l) > 0 {
			i.w.Write(append([]byte("  "), l...))
		}
	}
	return len(p), nil
}

// findTorchPython returns a Python interpreter that can import torch
// (python3 on PATH, then /usr/bin/python3, where Debian's python3-torch
// lives), or "" and why not.
func findTorchPython(ctx context.Context) (string, string) {
	var why []string
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		out, err := exec.CommandContext(ctx, py, "-c", "import torch").CombinedOutput()
		if err == nil {
			return py, ""
		}
		msg := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if msg == "" {
			msg = err.Error()
		}
		why = append(why, py+": "+msg)
	}
	return "", "python3 -c 'import torch' failed: " + strings.Join(why, "; ")
}

// torchSave has PyTorch write snap as a checkpoint, as a trainer's
// torch.save(model.state_dict(), path) would: the tensors reach Python
// through a .pt of snapd's torch codec (loaded with weights_only=True)
// and torch.save writes the published file.
func torchSave(ctx context.Context, py, dir string, codec formats.Codec, snap *snapshot.Snapshot, f io.Writer) error {
	in := filepath.Join(dir, "demo-torch-in.pt")
	out := filepath.Join(dir, "demo-torch-out.pt")
	defer os.Remove(in)
	defer os.Remove(out)
	var buf bytes.Buffer
	if err := codec.Encode(ctx, &buf, snap, formats.EncodeOptions{}); err != nil {
		return err
	}
	if err := os.WriteFile(in, buf.Bytes(), 0o600); err != nil {
		return err
	}
	script := "import sys, torch; torch.save(torch.load(sys.argv[1], weights_only=True), sys.argv[2])"
	if msg, err := exec.CommandContext(ctx, py, "-c", script, in, out).CombinedOutput(); err != nil {
		return fmt.Errorf("torch.save: %v: %s", err, bytes.TrimSpace(msg))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return err
}
