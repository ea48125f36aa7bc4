package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeSafetensors writes one F64 array "R" of shape rows×4 filled from a
// seeded PRNG (rows 0..same-1 identical for every seed).
func writeSafetensors(t *testing.T, path string, rows, same int, seed uint64) {
	t.Helper()
	n := rows * 4 * 8
	hdr := fmt.Sprintf(`{"R":{"dtype":"F64","shape":[%d,4],"data_offsets":[0,%d]}}`, rows, n)
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(hdr)))
	b.WriteString(hdr)
	same0 := rand.New(rand.NewPCG(1, 1))
	r := rand.New(rand.NewPCG(seed, 2))
	for i := 0; i < rows*4; i++ {
		v := r.Float64()
		if i < same*4 {
			v = same0.Float64()
		}
		binary.Write(&b, binary.LittleEndian, v)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// --pubkey requires a signature; --allow-unsigned opts out.
func TestVerifyPubkeyRequiresSignature(t *testing.T) {
	k := vectorKeys(t)
	d := t.TempDir()
	pub, hk := filepath.Join(k, "sign_ed25519.pub"), filepath.Join(k, "hmac.key")
	f := filepath.Join(d, "u.wtxt")
	mustRun(t, "convert", filepath.Join(vectors, "v1-basic.safetensors"), f, "--gen", "3", "--ts", "2026-01-01T00:00:00Z", "--hmac-key", hk)
	code, out, _ := snapd(t, nil, "verify", f, "--pubkey", pub, "--hmac-key", hk, "--json")
	var j verifyJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatal(err, out)
	}
	if code != 1 || j.OK || len(j.Failures) == 0 || j.Failures[0].Check != "signature" {
		t.Fatalf("unsigned file with --pubkey: exit %d ok=%v %+v", code, j.OK, j.Failures)
	}
	out = mustRun(t, "verify", f, "--pubkey", pub, "--hmac-key", hk, "--allow-unsigned")
	if !strings.Contains(out, "--allow-unsigned") {
		t.Fatalf("opt-out not reported:\n%s", out)
	}
	// A streamed file whose WSUM is unsigned.
	s := filepath.Join(d, "s.wtxt")
	mustRun(t, "convert", filepath.Join(vectors, "v1-basic.safetensors"), s, "--gen", "3", "--ts", "2026-01-01T00:00:00Z", "--stream", filepath.Join(d, "s.wsum"))
	if code, _, _ := snapd(t, nil, "verify", s, "--pubkey", pub); code != 1 {
		t.Fatalf("unsigned WSUM with --pubkey: exit %d", code)
	}
}

// Apply of a delta with a replaced chunk for a streamed
// target fails and leaves nothing; an honest one names the deferred checks.
func TestDeltaApplyStreamedReplacedChunk(t *testing.T) {
	k := vectorKeys(t)
	d := t.TempDir()
	p := func(n string) string { return filepath.Join(d, n) }
	sk := filepath.Join(k, "sign_ed25519")
	writeSafetensors(t, p("a.safetensors"), 64, 0, 1)
	writeSafetensors(t, p("b.safetensors"), 64, 32, 2)
	writeSafetensors(t, p("c.safetensors"), 64, 32, 3)
	for _, x := range []string{"a", "b", "c"} {
		mustRun(t, "convert", p(x+".safetensors"), p(x+".wtxt"), "--gen", "2", "--ts", "2026-01-01T00:00:00Z", "--sign-key", sk, "--rows-per-chunk", "8", "--stream", p(x+".wsum"))
	}
	mustRun(t, "delta", "make", p("a.wtxt"), p("b.wtxt"), p("ab.delta"))
	delta, _ := os.ReadFile(p("ab.delta"))
	other, _ := os.ReadFile(p("c.wtxt"))
	block := func(b []byte) []byte {
		i := bytes.Index(b, []byte("ch ix=000005 "))
		if i < 0 {
			t.Fatal("no chunk 5")
		}
		j := bytes.Index(b[i:], []byte("endch\n"))
		return b[i : i+j+len("endch\n")]
	}
	bad := bytes.Replace(delta, block(delta), block(other), 1)
	if bytes.Equal(bad, delta) {
		t.Fatal("splice did not apply")
	}
	os.WriteFile(p("bad.delta"), bad, 0o644)
	code, out, errs := snapd(t, nil, "delta", "apply", p("a.wtxt"), p("bad.delta"), p("out.wtxt"))
	if code != 1 || !strings.Contains(errs, "array-sha256") || strings.Contains(out, "applied") {
		t.Fatalf("replaced chunk: exit %d\n%s%s", code, out, errs)
	}
	if _, err := os.Stat(p("out.wtxt")); !os.IsNotExist(err) {
		t.Fatalf("output left behind: %v", err)
	}
	out = mustRun(t, "delta", "apply", p("a.wtxt"), p("ab.delta"), p("out.wtxt"))
	if !strings.Contains(out, "deferred") || !strings.Contains(out, "signature") {
		t.Fatalf("deferred checks not named:\n%s", out)
	}
	out = mustRun(t, "delta", "apply", p("a.wtxt"), p("ab.delta"), p("out2.wtxt"), "--wsum", p("b.wsum"))
	if strings.Contains(out, "deferred") {
		t.Fatalf("with --wsum nothing is deferred:\n%s", out)
	}
}

// Convert verifies a streamed WTXT with its WSUM.
func TestConvertStreamedVerifiesWSUM(t *testing.T) {
	d := t.TempDir()
	src, _ := os.ReadFile(filepath.Join(vectors, "v3-stream.wtxt"))
	wsum, _ := os.ReadFile(filepath.Join(vectors, "v3-stream.wsum"))
	p := func(n string) string { return filepath.Join(d, n) }
	os.WriteFile(p("g.wtxt"), src, 0o644)
	os.WriteFile(p("g.wsum"), wsum, 0o644)
	mustRun(t, "convert", p("g.wtxt"), p("g.safetensors"))
	renamed := bytes.Replace(src, []byte("arr name=mask "), []byte("arr name=masq "), 1)
	os.WriteFile(p("r.wtxt"), renamed, 0o644)
	os.WriteFile(p("r.wsum"), wsum, 0o644)
	code, _, errs := snapd(t, nil, "convert", p("r.wtxt"), p("r.safetensors"))
	if code != 1 || !strings.Contains(errs, "refusing to convert") {
		t.Fatalf("renamed array: exit %d\n%s", code, errs)
	}
	if _, err := os.Stat(p("r.safetensors")); !os.IsNotExist(err) {
		t.Fatal("output written")
	}
	os.WriteFile(p("n.wtxt"), src, 0o644)
	code, _, errs = snapd(t, nil, "convert", p("n.wtxt"), p("n.safetensors"))
	if code == 0 || !strings.Contains(errs, "WSUM") {
		t.Fatalf("no WSUM: exit %d\n%s", code, errs)
	}
	mustRun(t, "convert", p("n.wtxt"), p("n.safetensors"), "--wsum", p("g.wsum"))
}
