package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// streamFixture writes base.wtxt (streamed, chained to a non-zero
// merkle_prev; its WSUM kept away from it as base.wsum.keep) and
// target.wtxt (plain, one row of R changed) into dir and returns the
// base's merkle_prev.
func streamFixture(t *testing.T, dir string) [32]byte {
	t.Helper()
	meta := snapshot.DefaultMeta()
	meta.Gen, meta.TS, meta.Build = 2, time.Unix(1760000000, 0).UTC(), "test"
	r := make([]byte, 256*64*8)
	for i := range r {
		r[i] = byte(i * 7)
	}
	arrays := func(b []byte) []*snapshot.Array {
		return []*snapshot.Array{{Name: "R", DType: snapshot.F64, Shape: []int64{256, 64}, Data: snapshot.Bytes(b)}}
	}
	chain := [32]byte{1, 2, 3}
	var base, target bytes.Buffer
	res, err := wtxt.Encode(context.Background(), &base, &snapshot.Snapshot{Meta: meta, Arrays: arrays(r)}, wtxt.EncodeOptions{Stream: true, PrevMerkle: chain, RowsPerChunk: 16})
	if err != nil {
		t.Fatal(err)
	}
	r2 := append([]byte(nil), r...)
	for i := 40 * 64 * 8; i < 41*64*8; i++ {
		r2[i] = 0xee
	}
	if _, err := wtxt.Encode(context.Background(), &target, &snapshot.Snapshot{Meta: meta, Arrays: arrays(r2)}, wtxt.EncodeOptions{PrevMerkle: chain, RowsPerChunk: 16}); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"base.wtxt": base.Bytes(), "base.wsum.keep": res.WSUM, "target.wtxt": target.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return chain
}

// A short-form delta applied to a streamed base keeps the base's chain
// (merkle_prev from its WSUM: --base-wsum or BASE.wsum beside it) and is
// refused without the WSUM (it used to exit 0 with merkle_prev all zeros).
func TestDeltaApplyShortFormStreamedBase(t *testing.T) {
	d := t.TempDir()
	p := func(n string) string { return filepath.Join(d, n) }
	chain := streamFixture(t, d)
	// The full delta (base WSUM given), cut down to the seed's short form.
	out := mustRun(t, "delta", "make", "--base-wsum", p("base.wsum.keep"), p("base.wtxt"), p("target.wtxt"), p("full.wtxtdelta"))
	if !strings.Contains(out, "1 of 16 chunks changed") {
		t.Fatalf("make: %s", out)
	}
	full, _ := os.ReadFile(p("full.wtxtdelta"))
	i, j := bytes.Index(full, []byte("\nch ix=")), bytes.Index(full, []byte("endch\n"))
	short := fmt.Sprintf("%sarr name=R\n%sendch\nendarr\nenddelta\n", full[:bytes.IndexByte(full, '\n')+1], full[i+1:j])
	os.WriteFile(p("short.wtxtdelta"), []byte(short), 0o644)

	err := snapdErr(t, "delta", "apply", p("base.wtxt"), p("short.wtxtdelta"), p("out.wtxt"))
	if exitCode(err) != exitInvalid || !errors.Is(err, wtxt.ErrNeedWSUM) || !strings.Contains(err.Error(), "merkle_prev") || !strings.Contains(hintFor(err), "--base-wsum") {
		t.Fatalf("short form on a streamed base without its WSUM: %v (hint %q)", err, hintFor(err))
	}
	if _, err := os.Stat(p("out.wtxt")); !os.IsNotExist(err) {
		t.Fatal("refused apply left an output file")
	}
	check := func(args ...string) {
		t.Helper()
		os.Remove(p("out.wtxt"))
		out := mustRun(t, append([]string{"delta", "apply"}, args...)...)
		if !strings.Contains(out, "short-form arrays re-hashed") {
			t.Fatalf("apply: %s", out)
		}
		h, err := wtxt.ReadHeader(bytes.NewReader(mustRead(t, p("out.wtxt"))))
		if err != nil {
			t.Fatal(err)
		}
		if h.Pending || h.MerklePrev != chain {
			t.Fatalf("result merkle_prev %s, want the base's %s", hex.EncodeToString(h.MerklePrev[:]), hex.EncodeToString(chain[:]))
		}
		vout := mustRun(t, "verify", "--prev-merkle", hex.EncodeToString(chain[:]), p("out.wtxt"))
		if !strings.Contains(vout, "continues") {
			t.Fatalf("verify of the result:\n%s", vout)
		}
	}
	check("--base-wsum", p("base.wsum.keep"), p("base.wtxt"), p("short.wtxtdelta"), p("out.wtxt"))
	if err := os.Rename(p("base.wsum.keep"), p("base.wsum")); err != nil {
		t.Fatal(err)
	}
	check(p("base.wtxt"), p("short.wtxtdelta"), p("out.wtxt")) // found beside the base
}

// delta make verifies a streamed input with its WSUM and refuses one it
// cannot verify.
func TestDeltaMakeStreamedInputNeedsWSUM(t *testing.T) {
	d := t.TempDir()
	p := func(n string) string { return filepath.Join(d, n) }
	streamFixture(t, d)
	// The streamed file as TARGET (base: the plain one).
	err := snapdErr(t, "delta", "make", p("target.wtxt"), p("base.wtxt"), p("x.wtxtdelta"))
	if exitCode(err) != exitInvalid || !errors.Is(err, wtxt.ErrNeedWSUM) || !strings.Contains(err.Error(), "delta target") || !strings.Contains(hintFor(err), "--wsum") {
		t.Fatalf("streamed target without its WSUM: %v (hint %q)", err, hintFor(err))
	}
	if _, err := os.Stat(p("x.wtxtdelta")); !os.IsNotExist(err) {
		t.Fatal("refused make left an output file")
	}
	mustRun(t, "delta", "make", "--wsum", p("base.wsum.keep"), p("target.wtxt"), p("base.wtxt"), p("x.wtxtdelta"))
	// A WSUM that is not the file's is refused.
	os.WriteFile(p("bad.wsum"), []byte("WSUM 1 sha256_all="+strings.Repeat("0", 64)+" merkle_prev="+strings.Repeat("0", 64)+" merkle_this="+strings.Repeat("0", 64)+"\n"), 0o644)
	if code, _, errs := snapd(t, nil, "delta", "make", "--wsum", p("bad.wsum"), p("target.wtxt"), p("base.wtxt"), p("y.wtxtdelta")); code != exitInvalid || !strings.Contains(errs, "WSUM") {
		t.Fatalf("wrong WSUM: exit %d\n%s", code, errs)
	}
	// As BASE, found beside it.
	if code, _, _ := snapd(t, nil, "delta", "make", p("base.wtxt"), p("target.wtxt"), p("z.wtxtdelta")); code != exitInvalid {
		t.Fatalf("streamed base without its WSUM: exit %d", code)
	}
	os.Rename(p("base.wsum.keep"), p("base.wsum"))
	mustRun(t, "delta", "make", p("base.wtxt"), p("target.wtxt"), p("z.wtxtdelta"))
}

// The delta commands' --help lists only the flags they honour, and
// --sign-key (which signs an encrypted delta's seal) needs --encrypt-to.
func TestDeltaHelpListsHonouredFlags(t *testing.T) {
	for cmd, want := range map[string][]string{
		"make":  {"--base-wsum", "--wsum", "--encrypt-to", "--sign-key"},
		"apply": {"--base-wsum", "--wsum", "--identity"},
	} {
		out := mustRun(t, "delta", cmd, "--help")
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("delta %s --help lacks %s", cmd, w)
			}
		}
		for _, unused := range []string{"--state-dir", "--config", "--quiet", "Global Flags"} {
			if strings.Contains(out, unused) {
				t.Errorf("delta %s --help lists %s, which it does not use", cmd, unused)
			}
		}
	}
	d := t.TempDir()
	code, _, errs := snapd(t, nil, "delta", "make", "--sign-key", "k", filepath.Join(d, "a"), filepath.Join(d, "b"), filepath.Join(d, "c"))
	if code != exitUsage || !strings.Contains(errs, "--encrypt-to") {
		t.Fatalf("--sign-key without --encrypt-to: exit %d\n%s", code, errs)
	}
}

// snapdErr runs the CLI and returns its error (hint included).
func snapdErr(t *testing.T, args ...string) error {
	t.Helper()
	var out bytes.Buffer
	root := newRootCommand(newEnv(&out, &out))
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	return root.ExecuteContext(context.Background())
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
