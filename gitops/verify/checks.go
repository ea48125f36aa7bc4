package verify

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/gitops"
)

// checkPlain fully verifies a plaintext WTXT.
func (v *verifier) checkPlain(x *gv, name string, wf *materialized, wsum []byte) content {
	f, err := os.Open(wf.path)
	if err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
		return content{}
	}
	defer f.Close()
	opts := wtxt.VerifyOptions{TrustedKeys: v.fileKeys, RequireSignature: true}
	if wsum != nil {
		if armor.IsArmored(wsum) {
			x.note("%s is age-armored: not used", gitops.FileWSUM)
		} else {
			opts.WSUM = wsum
		}
	}
	rep, err := wtxt.Verify(v.ctx, bufio.NewReaderSize(f, 1<<20), opts)
	var werr *wtxt.Error
	if err != nil && !errors.As(err, &werr) {
		x.fail(name, 0, CheckObject, "read: %v", err)
		return content{}
	}
	if rep == nil {
		x.fail(name, 0, "wtxt", "%v", err)
		return content{}
	}
	x.g.Signature, x.g.KeyID = rep.Signature, rep.KeyID
	for _, e := range rep.Failures {
		file := name
		if e.Check == wtxt.CheckWSUM && e.Line > 0 && e.File != "" {
			file = e.File
		}
		x.fail(file, e.Line, "wtxt/"+string(e.Check), "%s", wtxtMessage(e))
	}
	h := rep.Header
	if h == nil {
		return content{}
	}
	// The declared (signed) values: when a check failed, the computed ones
	// are not the generation's; the failure is already reported.
	ct := rootContent(h.Root, name)
	if h.Pending {
		// Streamed: the root values come from the WSUM.
		ct.sha256All, ct.merklePrev, ct.merkleThis = rep.SHA256All, rep.MerklePrev, rep.MerkleThis
	}
	return ct
}

func wtxtMessage(e *wtxt.Error) string {
	var b strings.Builder
	if e.Array != "" {
		fmt.Fprintf(&b, "array %s: ", e.Array)
	}
	if e.Chunk >= 0 {
		fmt.Fprintf(&b, "chunk %d: ", e.Chunk)
	}
	b.WriteString(e.Msg)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// checkSealed verifies an age-armored WTXT through its seal, without
// decrypting.
func (v *verifier) checkSealed(x *gv, name string, wf *materialized, sealBytes []byte) content {
	x.note("age-armored: verified through %s without decrypting (the plaintext is not checked)", gitops.FileSeal)
	if sealBytes == nil {
		x.fail(gitops.FileSeal, 0, "seal/missing", "%s is age-armored and has no seal sidecar %s: nothing to verify it with public keys", name, gitops.FileSeal)
		x.g.Signature = wtxt.SigFailed
		return content{}
	}
	s, err := armor.ParseSeal(sealBytes)
	if err != nil {
		x.fail(gitops.FileSeal, 0, sealCheck(err), "%v", err)
		x.g.Signature = wtxt.SigFailed
		return content{}
	}
	ct := rootContent(s.Root, gitops.FileSeal)
	if s.Kind != armor.KindWTXT {
		x.fail(gitops.FileSeal, 0, "seal/kind", "kind=%s, want %s (the seal must describe %s)", s.Kind, armor.KindWTXT, name)
	}
	f, err := os.Open(wf.path)
	if err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
		return ct
	}
	srep, err := s.Check(bufio.NewReaderSize(f, 1<<20), armor.VerifyOptions{Trusted: v.fileKeys, RequireSignature: true})
	f.Close()
	if err != nil {
		file := gitops.FileSeal
		if c := sealCheck(err); c == "seal/bytes" || c == "seal/sha256" || c == "seal/armor" {
			file = name
		}
		x.fail(file, 0, sealCheck(err), "%v", err)
	}
	x.g.Signature, x.g.KeyID = srep.Signature, srep.KeyID
	if srep.Signature == wtxt.SigUnchecked || sealCheck(err) == "seal/armor" {
		x.g.Signature = wtxt.SigFailed // a signature is required here
	}
	return ct
}

func sealCheck(err error) string {
	var se *armor.SealError
	if errors.As(err, &se) {
		return "seal/" + se.Check
	}
	return "seal"
}

// checkDelta applies the generation's delta to the previous generation's
// WTXT and compares the output with this generation's WTXT byte for byte.
func (v *verifier) checkDelta(x *gv, name string, df *materialized, prev, cur *genState) {
	g := x.g
	g.Delta = "skipped"
	switch {
	case armor.IsArmored(df.head):
		x.note("%s is age-armored: not applied (needs decryption)", name)
		return
	case prev == nil && g.Chain == ChainAnchor:
		x.note("%s: its base is outside the verified range: not applied", name)
		return
	case prev == nil:
		x.note("%s in the first generation has no base in this history: not applied", name)
		return
	case prev.encrypted || cur.encrypted:
		x.note("%s: the previous or this generation is age-armored: not applied", name)
		return
	case prev.file == "" || cur.file == "":
		x.note("%s: the previous or this generation's WTXT could not be read: not applied", name)
		return
	}
	g.Delta = "failed"
	base, err := os.Open(prev.file)
	if err != nil {
		x.fail(name, 0, CheckDelta, "base working copy: %v", err)
		return
	}
	defer base.Close()
	want, err := os.Open(cur.file)
	if err != nil {
		x.fail(name, 0, CheckDelta, "working copy: %v", err)
		return
	}
	defer want.Close()
	d, err := os.Open(df.path)
	if err != nil {
		x.fail(name, 0, CheckDelta, "working copy: %v", err)
		return
	}
	defer d.Close()
	cw := &compareWriter{want: bufio.NewReaderSize(want, 1<<20), mismatch: -1}
	info, err := wtxt.ApplyDelta(v.ctx, cw, base, prev.size, bufio.NewReaderSize(d, 1<<20), name)
	wtxtName := path.Join(x.dir, gitops.FileWTXT)
	switch {
	case cw.mismatch >= 0:
		x.fail(name, 0, CheckDelta, "applied to generation %s it differs from %s at byte %d", prev.genText, wtxtName, cw.mismatch)
	case err != nil:
		var we *wtxt.Error
		if errors.As(err, &we) {
			x.fail(name, we.Line, CheckDelta, "applied to generation %s: %s: %s", prev.genText, we.Check, wtxtMessage(we))
		} else {
			x.fail(name, 0, CheckDelta, "applied to generation %s: %v", prev.genText, err)
		}
	case cw.n != cur.size:
		x.fail(name, 0, CheckDelta, "applied to generation %s it gives %d bytes, %s has %d", prev.genText, cw.n, wtxtName, cur.size)
	default:
		g.Delta = "applied"
		x.note("delta applied to generation %s: %d of %d chunks carried, output identical to %s", prev.genText, info.Changed, info.Chunks, gitops.FileWTXT)
	}
}

// checkSummary compares generation.txt with the content and the files.
func (v *verifier) checkSummary(x *gv, entries map[string]object.TreeEntry, dir *object.Tree, ct content, files map[string]*materialized) {
	data, _ := v.smallFile(x, dir, entries, gitops.FileSummary, gitops.MaxSummaryBytes)
	if data == nil {
		if _, ok := entries[gitops.FileSummary]; !ok {
			x.fail(gitops.FileSummary, 0, CheckSummary, "missing")
		}
		return
	}
	kv, err := gitops.ParseSummary(data)
	if err != nil {
		x.fail(gitops.FileSummary, 0, CheckSummary, "%v", err)
		return
	}
	want := map[string]string{"layout": x.g.Layout}
	if ct.known {
		vals := ct.vals()
		for i, f := range (wtxt.Root{}).Fields() {
			want[f.Key] = *vals[i]
		}
	}
	for _, ext := range []string{"wtxt", "wtxtdelta", "wsum", "wseal", "skel"} {
		if m := files[ext]; m != nil {
			want[ext+"_bytes"] = strconv.FormatInt(m.size, 10)
			if m.sha256 == "" && kv[ext+"_sha256"] != "" {
				m.sha256 = v.fileSHA256(m)
			}
			if m.sha256 != "" {
				want[ext+"_sha256"] = m.sha256
			}
		} else if ext != "wtxt" {
			for _, k := range []string{ext + "_bytes", ext + "_sha256"} {
				if _, ok := kv[k]; ok {
					x.fail(gitops.FileSummary, 0, CheckSummary, "%s is set but the generation has no %s file", k, ext)
				}
			}
		}
	}
	v.checkOCISummary(x, kv)
	for _, k := range summaryKeys(want) {
		got, ok := kv[k]
		switch {
		case !ok && x.optional[k]:
		case !ok:
			x.fail(gitops.FileSummary, 0, CheckSummary, "%s missing (want %s)", k, want[k])
		case got != want[k]:
			x.fail(gitops.FileSummary, 0, CheckSummary, "%s=%s, but the generation's files give %s", k, got, want[k])
		}
	}
}

// summaryKeys returns the keys of m in the summary file's order.
func summaryKeys(m map[string]string) []string {
	order := []string{"gen", "ts", "build", "sha256_all", "merkle_prev", "merkle_this", "layout",
		"wtxt_bytes", "wtxt_sha256", "wtxtdelta_bytes", "wtxtdelta_sha256", "wsum_bytes", "wsum_sha256", "wseal_bytes", "wseal_sha256", "skel_bytes", "skel_sha256"}
	var out []string
	for _, k := range order {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16] + "…"
	}
	return h
}
