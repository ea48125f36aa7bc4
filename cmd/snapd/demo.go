package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/snapshot"
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
it generates keys, runs a synthetic "trainer" that publishes generations in
two formats (safetensors and zTensor) with a few rows changing each step,
turns each into a signed, HMAC'd, Merkle-chained WTXT snapshot, makes a
DELTA v2 against the previous generation, verifies everything with the
public key only, and prints a row-blocked diff of the last step.

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
	for name, shape := range map[string][]int64{"embed.weight": {4096, 64}, "layer0.attn.w": {1024, 256}, "layer0.attn.b": {256}, "head.weight": {256, 1024}} {
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
	for name, v := range m.arrays {
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
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "snapd-demo-")
		if err != nil {
			return ioError{err}
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if o.gens < 2 {
		return usageError{fmt.Errorf("--gens %d: need at least 2", o.gens)}
	}
	w := e.stdout
	k, err := keys.Generate(filepath.Join(dir, "keys"))
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
	fmt.Fprintf(w, "snapd demo in %s\nkeys: %s (keyid %s)\n\n", dir, k.Dir, keys.KeyID(k.PublicKey))
	gensDir, ringDir := filepath.Join(dir, "gens"), filepath.Join(dir, "ring")
	os.MkdirAll(gensDir, 0o755)
	os.MkdirAll(ringDir, 0o755)
	reg := newRegistry()
	model := newDemoModel()
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "gen\tpublished as\tsource bytes\tWTXT bytes\tdelta bytes\tchunks changed\tmerkle_this\tverify\t")
	var prevMerkle [32]byte
	var prevWTXT []byte
	var lastTwo [2]*snapshot.Snapshot
	for gen := 1; gen <= o.gens; gen++ {
		if gen > 1 {
			model.train()
		}
		// The trainer publishes in whatever format it writes.
		fmtName := "safetensors"
		ext := ".safetensors"
		if gen%2 == 0 {
			fmtName, ext = "ztensor", ".zt"
		}
		codec, _ := reg.ByName(fmtName)
		src := filepath.Join(gensDir, fmt.Sprintf("gen-%06d%s", gen, ext))
		if err := writeAtomic(src, func(f *os.File) error {
			return codec.Encode(ctx, f, model.snapshot(), formats.EncodeOptions{})
		}); err != nil {
			return err
		}
		// snapd's part: sniff, decode, encode WTXT, delta, verify.
		in, err := openSnapshot(ctx, reg, src, "")
		if err != nil {
			return err
		}
		s := in.Snapshot
		s.Meta = snapshot.DefaultMeta()
		s.Meta.Gen = uint64(gen)
		s.Meta.TS, _ = wtxt.DefaultTS(e.getenv, e.now)
		s.Meta.Build = "demo"
		var buf bytes.Buffer
		res, err := wtxt.Encode(ctx, &buf, s, wtxt.EncodeOptions{SignKey: signer, HMACKey: hmacKey, PrevMerkle: prevMerkle})
		if err != nil {
			in.Close()
			return err
		}
		out := buf.Bytes()
		plain, err := wtxt.New().Decode(ctx, bytes.NewReader(out), int64(len(out)), formats.DecodeOptions{Name: "demo"})
		if err != nil {
			in.Close()
			return err
		}
		lastTwo[0], lastTwo[1] = lastTwo[1], plain
		if err := os.WriteFile(filepath.Join(ringDir, fmt.Sprintf("gen-%06d.wtxt", gen)), out, 0o644); err != nil {
			in.Close()
			return ioError{err}
		}
		st, _ := os.Stat(src)
		deltaCol, changedCol := "-", "-"
		if prevWTXT != nil {
			var d bytes.Buffer
			info, err := wtxt.MakeDelta(ctx, &d, bytes.NewReader(prevWTXT), int64(len(prevWTXT)), bytes.NewReader(out), int64(len(out)))
			if err != nil {
				in.Close()
				return err
			}
			os.WriteFile(filepath.Join(ringDir, fmt.Sprintf("gen-%06d.wtxtdelta", gen)), d.Bytes(), 0o644)
			deltaCol = fmt.Sprintf("%d (%.1f%%)", d.Len(), 100*float64(d.Len())/float64(len(out)))
			changedCol = fmt.Sprintf("%d/%d", info.Changed, info.Chunks)
		}
		pm := prevMerkle
		rep, verr := wtxt.Verify(ctx, bytes.NewReader(out), wtxt.VerifyOptions{TrustedKeys: pubs, HMACKey: hmacKey, PrevMerkle: &pm, RequireSignature: true})
		in.Close()
		status := "OK (signature, HMAC, chain)"
		if verr != nil {
			status = "FAILED: " + verr.Error()
		}
		fmt.Fprintf(tw, "%06d\t%s\t%d\t%d\t%s\t%s\t%s…\t%s\t\n", gen, fmtName, st.Size(), len(out), deltaCol, changedCol, rep.MerkleThis[:16], status)
		prevMerkle, prevWTXT = res.MerkleThis, out
	}
	tw.Flush()
	ds, err := snapshot.Diff(ctx, lastTwo[0], lastTwo[1], snapshot.DiffOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nWhat changed from generation %06d to %06d (row-blocked diff):\n", o.gens-1, o.gens)
	writeDiffText(indent{w}, ds)
	fmt.Fprintf(w, "\nEvery generation is chained to the previous one (merkle_prev = previous merkle_this) and\nsigned; verify one yourself with:\n  snapd verify %s --pubkey %s --prev %s\n",
		filepath.Join(ringDir, fmt.Sprintf("gen-%06d.wtxt", o.gens)), k.SignPub, filepath.Join(ringDir, fmt.Sprintf("gen-%06d.wtxt", o.gens-1)))
	if o.dir == "" {
		fmt.Fprintln(w, "(the demo's files are removed at exit; pass --dir DIR to keep them)")
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
