//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestOCIPushCheckpoint: `snapd oci push CHECKPOINT` (no WTXT written)
// gives the same skeleton and manifest as `snapd convert` then `snapd oci
// push WTXT` with the same options, for a first generation and for a
// second one chained with --prev (a skeleton) and --prev-skeleton; the
// skeleton assembles to the WTXT convert writes. WTXT options given with a
// WTXT input are refused.
func TestOCIPushCheckpoint(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	env := map[string]string{"HOME": t.TempDir()}
	d := t.TempDir()
	k := vectorKeys(t)
	keyArgs := []string{"--sign-key", filepath.Join(k, "sign_ed25519"), "--hmac-key", filepath.Join(k, "hmac.key"), "--build", "t", "--rows-per-chunk", "64"}
	push := func(repo string, args ...string) string {
		t.Helper()
		args = append([]string{"oci", "push"}, args...)
		args = append(args, "--oci-repository", reg.Host+"/"+repo, "--segment-size", "8192", "--json")
		code, out, errs := snapd(t, env, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
		}
		return out
	}
	type result struct {
		Manifest           string
		Segments, Uploaded int
		Reused             int
	}
	parse := func(out string) result {
		t.Helper()
		var r result
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Manifest == "" {
			t.Fatalf("push output %s: %v", out, err)
		}
		return r
	}
	var prevWTXT, prevSkel string
	for g := 1; g <= 2; g++ {
		ck := filepath.Join(d, "model.safetensors")
		writeSafetensors(t, ck, 3000, 2500, uint64(g)) // rows 2500.. change
		gen := []string{"--gen", string(rune('0' + g)), "--ts", "2026-11-24T06:00:00Z"}
		wt := filepath.Join(d, "via-wtxt", "g.wtxt")
		os.MkdirAll(filepath.Dir(wt), 0o755)
		conv := append([]string{"convert", ck, wt}, gen...)
		conv = append(conv, keyArgs...)
		chain := []string{}
		if g > 1 {
			conv = append(conv, "--prev", prevWTXT)
			chain = []string{"--prev", prevSkel, "--prev-skeleton", prevSkel}
		}
		mustRun(t, conv...)
		viaWTXT := parse(push("a/model", wt, "--skeleton", filepath.Join(d, "a.skel")))

		direct := filepath.Join(d, "b.skel")
		args := append([]string{ck, "--skeleton", direct}, gen...)
		args = append(append(args, keyArgs...), chain...)
		res := parse(push("b/model", args...))
		if res.Manifest != viaWTXT.Manifest || res.Segments < 4 {
			t.Fatalf("gen %d: %+v, via WTXT %+v", g, res, viaWTXT)
		}
		a, _ := os.ReadFile(filepath.Join(d, "a.skel"))
		b, _ := os.ReadFile(direct)
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Fatalf("gen %d: skeletons differ (%d and %d bytes)", g, len(a), len(b))
		}
		// Gen 1 uploads everything; gen 2 only what changed (rows
		// 2500.. of 3000), the rest known from --prev-skeleton.
		if g == 1 && res.Uploaded != res.Segments || g == 2 && (res.Reused == 0 || res.Uploaded == 0 || res.Uploaded+res.Reused != res.Segments) {
			t.Fatalf("gen %d: %+v", g, res)
		}
		asm := filepath.Join(d, "asm.wtxt")
		if code, out, errs := snapd(t, env, "assemble", "--oci-repository", reg.Host+"/b/model", direct, asm); code != 0 {
			t.Fatalf("assemble: exit %d\n%s%s", code, out, errs)
		}
		want, _ := os.ReadFile(wt)
		if got, _ := os.ReadFile(asm); !bytes.Equal(got, want) {
			t.Fatalf("gen %d: assembled WTXT differs from convert's", g)
		}
		if g == 1 {
			b, _ := os.ReadFile(wt)
			os.WriteFile(filepath.Join(d, "prev0.wtxt"), b, 0o644)
		}
		prevWTXT = filepath.Join(d, "prev.wtxt")
		os.Rename(wt, prevWTXT)
		prevSkel = filepath.Join(d, "prev.skel")
		os.Rename(direct, prevSkel)
	}
	// The automatic segment size is the same both ways (from the WTXT's
	// size, which a checkpoint push computes without writing it).
	auto := func(in string, extra ...string) string {
		t.Helper()
		args := append([]string{"oci", "push", in, "--oci-repository", reg.Host + "/c/model", "--skeleton", filepath.Join(d, "auto.skel"), "--json"}, extra...)
		code, out, errs := snapd(t, env, args...)
		if code != 0 {
			t.Fatalf("auto: exit %d\n%s%s", code, out, errs)
		}
		var r struct {
			SegmentSize int64 `json:"segment_size"`
			Manifest    string
		}
		json.Unmarshal([]byte(out), &r)
		return fmt.Sprint(r.SegmentSize, r.Manifest)
	}
	ck := filepath.Join(d, "model.safetensors")
	wantAuto := auto(prevWTXT)
	if got := auto(ck, "--gen", "2", "--ts", "2026-11-24T06:00:00Z", "--build", "t", "--rows-per-chunk", "64", "--sign-key", filepath.Join(k, "sign_ed25519"),
		"--hmac-key", filepath.Join(k, "hmac.key"), "--prev", filepath.Join(d, "prev0.wtxt")); got != wantAuto {
		t.Fatalf("automatic segment size: checkpoint %s, WTXT %s", got, wantAuto)
	}
	// A FIFO is refused without being opened (an open would block).
	fifo := filepath.Join(d, "model.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := snapd(t, env, "oci", "push", fifo, "--oci-repository", reg.Host+"/a/model"); code != 2 || !strings.Contains(errs, "not a regular file") {
		t.Fatalf("FIFO input: exit %d %s", code, errs)
	}
	if code, _, errs := snapd(t, env, "oci", "push", prevWTXT, "--oci-repository", reg.Host+"/a/model", "--gen", "3"); code != 2 || !strings.Contains(errs, "--gen applies to a checkpoint input only") {
		t.Fatalf("--gen with a WTXT: exit %d %s", code, errs)
	}
}
