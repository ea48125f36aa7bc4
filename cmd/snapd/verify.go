package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/internal/where"
	"github.com/snapd-ml/snapd/keys"
)

type verifyOptions struct {
	file string
	trustFlags
	wsum             string
	prevMerkle, prev string
	identity         string
	json             bool
}

func newVerifyCommand(e *env) *cobra.Command {
	var o verifyOptions
	cmd := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a WTXT snapshot (or an age-armored one through its seal) with public keys only",
		Long: `Verify FILE against every rule of the WTXT 1.1 profile: text rules, grammar,
per-line parity, base64, per-chunk crc32c and sha256, chunk geometry, per-array
sha256 (and HMAC with --hmac-key), sha256_all, merkle_this, fastxor, and the
Ed25519 signature against --pubkey: giving --pubkey means the file must be
signed by one of those keys (an unsigned file fails) unless --allow-unsigned
is given. A streamed snapshot (root_pending) is
verified jointly with its WSUM file (--wsum, default FILE's name with .wsum).

An age-armored FILE is verified without decrypting through its seal
FILE.wseal: the seal's signature, the armored bytes' size and SHA-256, the
armor's ASCII form, and the Merkle chain. With --identity it is also
decrypted and the plaintext fully verified against the seal.

Arrays without HMAC are reported as unauthenticated; an audit line is
reported as unsigned (no hash or signature covers it).

Exit status: 0 all checks pass, 1 a check failed, 2 usage or I/O error.`,
		Example: `  snapd verify gen2.wtxt --pubkey keys/sign_ed25519.pub --prev gen1.wtxt --require-signature
  snapd verify gen2.wtxt --pubkey allowed_signers --hmac-key keys/hmac.key --json
  snapd verify gen3.wtxt.age --pubkey keys/sign_ed25519.pub            # encrypted: seal only`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.file = args[0]
			return runVerify(cmd.Context(), e, &o)
		},
	}
	f := cmd.Flags()
	o.trustFlags.register(f)
	f.StringVar(&o.wsum, "wsum", "", usageWSUMIn)
	f.StringVar(&o.prevMerkle, "prev-merkle", "", "merkle_this of the previous generation (64 hex): check the chain")
	f.StringVar(&o.prev, "prev", "", "previous generation's WTXT, WSUM or sealed file: check the chain")
	f.StringVar(&o.identity, "identity", "", usageIdentity)
	f.BoolVar(&o.json, "json", false, usageJSON)
	cmd.MarkFlagsMutuallyExclusive("prev-merkle", "prev")
	cmd.MarkFlagsMutuallyExclusive("require-signature", "allow-unsigned")
	return cmd
}

// verifyJSON is the machine-readable report of `snapd verify --json`.
type verifyJSON struct {
	OK       bool            `json:"ok"`
	File     string          `json:"file"`
	Kind     string          `json:"kind"` // wtxt, sealed
	Meta     map[string]any  `json:"meta,omitempty"`
	Report   *wtxt.Report    `json:"report,omitempty"`
	Seal     *sealJSON       `json:"seal,omitempty"`
	Failures []failureJSON   `json:"failures"`
	Notes    []string        `json:"notes,omitempty"`
	Extra    json.RawMessage `json:"-"`
}

type sealJSON struct {
	Kind       string `json:"kind"`
	Gen        uint64 `json:"gen"`
	GenText    string `json:"gen_text"`
	Signature  string `json:"signature"`
	KeyID      string `json:"keyid,omitempty"`
	MerklePrev string `json:"merkle_prev"`
	MerkleThis string `json:"merkle_this"`
	Decrypted  bool   `json:"decrypted"`
}

type failureJSON struct {
	Check string `json:"check"`
	File  string `json:"file,omitempty"`
	Line  int    `json:"line,omitempty"`
	Array string `json:"array,omitempty"`
	Chunk *int64 `json:"chunk,omitempty"`
	Msg   string `json:"message"`
}

func toFailures(fs []*wtxt.Error) []failureJSON {
	out := []failureJSON{}
	for _, f := range fs {
		j := failureJSON{Check: string(f.Check), File: f.File, Line: f.Line, Array: f.Array, Msg: f.Msg}
		if f.Chunk >= 0 {
			c := f.Chunk
			j.Chunk = &c
		}
		out = append(out, j)
	}
	return out
}

// errVerifyFailed makes verify exit 1 after printing its report.
type errVerifyFailed struct{ err error }

func (e errVerifyFailed) Error() string { return e.err.Error() }
func (e errVerifyFailed) Unwrap() error { return e.err }

func runVerify(ctx context.Context, e *env, o *verifyOptions) error {
	trusted, err := loadFileSigners(o.pubkeys, o.file)
	if err != nil {
		return err
	}
	opts := wtxt.VerifyOptions{File: o.file, TrustedKeys: trusted, RequireSignature: o.requireSig, AllowUnsigned: o.allowUnsigned}
	if o.hmacKey != "" {
		if opts.HMACKey, err = keys.LoadHMACKey(o.hmacKey); err != nil {
			return keyError(err)
		}
	}
	if o.prevMerkle != "" {
		b, err := hex.DecodeString(o.prevMerkle)
		if err != nil || len(b) != 32 || strings.ToLower(o.prevMerkle) != o.prevMerkle {
			return usageError{errors.New("--prev-merkle: want 64 lowercase hex digits")}
		}
		var pm [32]byte
		copy(pm[:], b)
		opts.PrevMerkle = &pm
	}
	if o.prev != "" {
		pm, err := prevMerkleFromFile(o.prev)
		if err != nil {
			return err
		}
		opts.PrevMerkle = &pm
	}
	h, err := readHead(o.file, 64)
	if err != nil {
		return ioError{err}
	}
	if armor.IsArmored(h) {
		return verifySealed(ctx, e, o, opts)
	}
	f, err := os.Open(o.file)
	if err != nil {
		return ioError{err}
	}
	defer f.Close()
	if err := loadWSUM(o, &opts); err != nil {
		return err
	}
	var size int64
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	m := e.meter(filepath.Base(o.file), size)
	rep, verr := wtxt.Verify(ctx, m.Reader(f), opts)
	if verr != nil {
		m.Clear()
	} else {
		m.Finish()
	}
	var werr *wtxt.Error
	if verr != nil && !errors.As(verr, &werr) {
		return ioError{verr}
	}
	if rep.Failures == nil {
		rep.Failures = []*wtxt.Error{} // JSON: [] (docs/JSON.md)
	}
	out := verifyJSON{OK: verr == nil, File: o.file, Kind: "wtxt", Report: rep, Failures: toFailures(rep.Failures)}
	if o.json {
		if rep.Header != nil {
			out.Meta = metaJSON(rep.Header)
		}
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		printVerify(e.stdout, rep, opts)
	}
	if verr != nil {
		return errVerifyFailed{verr}
	}
	return nil
}

// loadWSUM reads --wsum, or FILE's sibling .wsum when the file is streamed.
func loadWSUM(o *verifyOptions, opts *wtxt.VerifyOptions) error {
	path := o.wsum
	if path == "" {
		cand := strings.TrimSuffix(o.file, ".wtxt") + ".wsum"
		if _, err := os.Stat(cand); err != nil {
			return nil
		}
		path = cand
	}
	b, err := readLimited(path, 4096)
	if err != nil {
		return ioError{err}
	}
	opts.WSUM = b
	return nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}

func metaJSON(h *wtxt.Header) map[string]any {
	m := map[string]any{
		"schema": h.Meta.Schema, "gen": genNumber(h.Gen), "gen_text": h.Gen, "ts": h.TS, "build": h.Meta.Build,
		"host": h.Meta.Host, "cuda": h.Meta.Cuda, "caps": h.Caps, "streamed": h.Pending,
	}
	if !h.Pending {
		root := h.Root.Fields()
		for _, f := range root[3:] { // sha256_all, merkle_prev, merkle_this
			m[f.Key] = f.Value
		}
		m["fastxor"] = fmt.Sprintf("%016x", h.Fastxor)
	}
	if h.KeyID != "" {
		m["keyid"] = h.KeyID
	}
	return m
}

// genNumber is a generation as written ("000123") as a number, for JSON
// (docs/JSON.md: gen is always a number, gen_text the padded form); 0
// when s is not one.
func genNumber(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printVerify(w io.Writer, rep *wtxt.Report, opts wtxt.VerifyOptions) {
	h := rep.Header
	if h != nil {
		fmt.Fprintf(w, "%s: WTXT 1 gen=%s ts=%s build=%s schema=%s\n", opts.File, h.Gen, h.TS, h.Meta.Build, h.Meta.Schema)
	}
	status := "OK"
	if !rep.OK() {
		status = fmt.Sprintf("FAILED (%d check(s))", len(rep.Failures))
	}
	fmt.Fprintf(w, "  result:      %s\n", status)
	if h == nil {
		for _, f := range rep.Failures {
			fmt.Fprintf(w, "  FAIL %v\n", f)
		}
		return
	}
	sig := rep.Signature
	switch sig {
	case wtxt.SigVerified:
		sig = "verified (keyid " + rep.KeyID + ")"
	case wtxt.SigUnchecked:
		sig = "present but NOT checked (keyid " + rep.KeyID + "; give --pubkey)"
	case wtxt.SigAbsent:
		sig = "absent (unsigned)"
		if opts.AllowUnsigned && len(opts.TrustedKeys) > 0 && rep.OK() {
			sig = "absent (unsigned; accepted because of --allow-unsigned)"
		}
	}
	fmt.Fprintf(w, "  signature:   %s\n", sig)
	chain := rep.Chain
	switch chain {
	case "first":
		chain = "first generation (merkle_prev is zero)"
	case "unchecked":
		chain = "not checked (give --prev or --prev-merkle)"
	case "continues":
		chain = "continues the previous generation"
	}
	fmt.Fprintf(w, "  chain:       %s\n", chain)
	if rep.Streamed {
		fmt.Fprintf(w, "  streamed:    root_pending, finalized by WSUM\n")
	}
	fmt.Fprintf(w, "  sha256_all:  %s\n  merkle_this: %s\n", rep.SHA256All, rep.MerkleThis)
	var raw int64
	for _, a := range rep.Arrays {
		raw += a.Bytes
	}
	fmt.Fprintf(w, "  arrays:      %d (%d raw bytes)\n", len(rep.Arrays), raw)
	hmacState := hmacSummary(rep, opts)
	fmt.Fprintf(w, "  hmac:        %s\n", hmacState)
	if rep.Audit != "" {
		fmt.Fprintf(w, "  audit line is UNSIGNED (no hash or signature covers it): %s\n", rep.Audit)
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "  FAIL %v\n", f)
	}
	if rep.OK() {
		sum := "signature " + sig
		switch rep.Signature {
		case wtxt.SigUnchecked:
			sum = "signature not checked (keyid " + rep.KeyID + "; no --pubkey)"
		case wtxt.SigAbsent:
			sum = "unsigned"
			if opts.AllowUnsigned && len(opts.TrustedKeys) > 0 {
				sum = "unsigned (accepted: --allow-unsigned)"
			}
		}
		fmt.Fprintf(w, "OK: %s; arrays: %d checked (CRC32C/SHA-256); HMAC %s\n", sum, len(rep.Arrays), hmacState)
	}
}

// hmacSummary says, without alarm, what the per-array HMACs of a report
// establish: "verified", "not checked (no --hmac-key)" when the file
// carries HMACs but no key was given, "absent (the file carries none)",
// or a count when only some arrays carry one. It never lists arrays.
func hmacSummary(rep *wtxt.Report, opts wtxt.VerifyOptions) string {
	var verified, absent, unchecked int
	for _, a := range rep.Arrays {
		switch a.HMAC {
		case wtxt.HMACVerified:
			verified++
		case wtxt.HMACAbsent:
			absent++
		case wtxt.HMACUnchecked:
			unchecked++
		}
	}
	n := len(rep.Arrays)
	switch {
	case n == 0:
		return "none (no arrays)"
	case verified == n:
		return "verified"
	case absent == n:
		return "absent (the file carries none)"
	case unchecked > 0 && opts.HMACKey == nil:
		if absent > 0 {
			return fmt.Sprintf("not checked (no --hmac-key; %d of %d arrays carry one)", unchecked, n)
		}
		return "not checked (no --hmac-key)"
	case verified > 0 && absent > 0 && verified+absent == n:
		return fmt.Sprintf("verified for %d of %d arrays (%d carry none)", verified, n, absent)
	}
	return fmt.Sprintf("verified for %d of %d arrays", verified, n)
}

// verifySealed checks an armored file through its seal and, with
// --identity, decrypts and verifies the plaintext against the seal
// (armor.VerifySealed); it prints the report.
func verifySealed(ctx context.Context, e *env, o *verifyOptions, opts wtxt.VerifyOptions) error {
	sb, err := readLimited(armor.SealPath(o.file), 4096)
	if err != nil {
		return withHint(ioError{err}, "an encrypted snapshot is verified through its seal FILE.wseal, written beside it by `snapd convert --encrypt-to`")
	}
	seal, err := armor.ParseSeal(sb)
	if err != nil {
		return fmt.Errorf("%s: %w", armor.SealPath(o.file), where.At(armor.SealPath(o.file), err))
	}
	f, err := os.Open(o.file)
	if err != nil {
		return ioError{err}
	}
	defer f.Close()
	so := armor.SealedOptions{
		Seal:      armor.VerifyOptions{Trusted: opts.TrustedKeys, RequireSignature: o.requireSig || len(opts.TrustedKeys) > 0 && !o.allowUnsigned, PrevMerkle: opts.PrevMerkle},
		Plaintext: opts,
		WSUM: func() ([]byte, error) {
			if err := loadWSUM(o, &opts); err != nil {
				return nil, err
			}
			return opts.WSUM, nil
		},
	}
	if o.identity != "" {
		so.Identities = func() ([]age.Identity, error) {
			ids, err := keys.LoadAgeIdentities(o.identity)
			if err != nil {
				return nil, keyError(err)
			}
			return ids, nil
		}
	}
	res, err := armor.VerifySealed(ctx, o.file, f, seal, so)
	if err != nil {
		return err
	}
	out := verifyJSON{File: o.file, Kind: "sealed", Failures: []failureJSON{}, Report: res.Plaintext}
	sj := &sealJSON{Kind: seal.Kind, Gen: genNumber(seal.Gen), GenText: seal.Gen, MerklePrev: hex.EncodeToString(seal.MerklePrev[:]), MerkleThis: hex.EncodeToString(seal.MerkleThis[:]),
		Signature: res.Seal.Signature, KeyID: res.Seal.KeyID, Decrypted: res.Decrypted}
	if sj.Signature == wtxt.SigFailed {
		sj.Signature = wtxt.SigUnchecked // this command's word for a signature that did not verify
	}
	out.Seal = sj
	fails, rep := res.Failures, res.Plaintext
	for _, f := range fails {
		out.Failures = append(out.Failures, failureJSON{Check: "seal", File: o.file, Msg: f.Error()})
	}
	out.OK = len(fails) == 0
	if o.json {
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		status := "OK"
		if !out.OK {
			status = "FAILED"
		}
		fmt.Fprintf(e.stdout, "%s: age-armored %s, gen=%s, sealed\n  result:      %s\n  seal:        signature %s", o.file, seal.Kind, seal.Gen, status, sj.Signature)
		if sj.KeyID != "" {
			fmt.Fprintf(e.stdout, " (keyid %s)", sj.KeyID)
		}
		fmt.Fprintf(e.stdout, "\n  merkle_this: %s\n", sj.MerkleThis)
		if opts.PrevMerkle != nil {
			fmt.Fprintf(e.stdout, "  chain:       checked against the previous generation\n")
		}
		if sj.Decrypted {
			fmt.Fprintf(e.stdout, "  decrypted:   yes, plaintext verified and matches the seal\n")
		} else {
			fmt.Fprintf(e.stdout, "  decrypted:   no (verify-only; give --identity to check the plaintext)\n")
		}
		if rep != nil && !rep.OK() {
			printVerify(e.stdout, rep, opts)
		}
		for _, f := range fails {
			fmt.Fprintf(e.stdout, "  FAIL %v\n", f)
		}
	}
	if len(fails) > 0 {
		return errVerifyFailed{fails[0]}
	}
	return nil
}
