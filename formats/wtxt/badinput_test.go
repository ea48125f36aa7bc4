package wtxt

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

func unsignedSmall(t testing.TB) []byte {
	s := &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{
		randArray(1, "A", snapshot.F64, 4, 3),
		randArray(2, "B", snapshot.I16, 70),
	}}
	data, _ := encodeBytes(t, s, EncodeOptions{})
	return data
}

// TestBadInput: each malformed file fails with a located *Error naming
// the expected check, without panicking or allocating by declared sizes.
func TestBadInput(t *testing.T) {
	good := string(unsignedSmall(t))
	arrA := good[strings.Index(good, "arr name=A"):strings.Index(good, "arr name=B")]
	for _, tc := range []struct {
		name  string
		mut   func(string) string
		check Check
	}{
		{"empty", func(string) string { return "" }, CheckTruncated},
		{"truncated", func(s string) string { return s[:len(s)/2] }, CheckText},
		{"truncated at line", func(s string) string { return s[:strings.LastIndex(s[:len(s)/2], "\n")+1] }, CheckTruncated},
		{"non-ascii", func(s string) string { return strings.Replace(s, "build=test", "build=tést", 1) }, CheckText},
		{"CRLF", func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }, CheckText},
		{"tab", func(s string) string { return strings.Replace(s, "cap ext", "cap\text", 1) }, CheckText},
		{"trailing space", func(s string) string { return strings.Replace(s, "endarr\n", "endarr \n", 1) }, CheckText},
		{"empty line", func(s string) string { return strings.Replace(s, "endarr\n", "endarr\n\n", 1) }, CheckText},
		{"bad magic", func(s string) string { return "WTXT 2" + s[6:] }, CheckGrammar},
		{"field order", func(s string) string { return strings.Replace(s, "endian=LE host=cpu", "host=cpu endian=LE", 1) }, CheckGrammar},
		{"gen unpadded", func(s string) string { return strings.Replace(s, "gen=000002", "gen=2", 1) }, CheckGrammar},
		{"duplicate array", func(s string) string { return strings.Replace(s, "arr name=B", arrA+"arr name=B", 1) }, CheckGrammar},
		{"misordered", func(s string) string {
			b := s[strings.Index(s, "arr name=B"):strings.Index(s, "endwtxt")]
			return strings.Replace(strings.Replace(s, b, "", 1), "arr name=A", b+"arr name=A", 1)
		}, CheckGrammar},
		{"wrong bytes", func(s string) string { return strings.Replace(s, "bytes=96 ", "bytes=97 ", 1) }, CheckGrammar},
		{"absurd size", func(s string) string {
			return strings.Replace(s, "shape=4,3 order=C bytes=96", "shape=4000000000000,3 order=C bytes=96000000000000", 1)
		}, CheckGeometry},
		{"overflow shape", func(s string) string {
			return strings.Replace(s, "shape=4,3", "shape=9223372036854775807,9223372036854775807", 1)
		}, CheckGrammar},
		{"wrong lines", func(s string) string { return strings.Replace(s, "lines=2\n", "lines=3\n", 1) }, CheckGeometry},
		{"bad base64", func(s string) string {
			i := strings.Index(s, "lines=")
			i = strings.Index(s[i:], "\n") + i + 1
			return s[:i] + "!" + s[i+1:] // parity happens to agree
		}, CheckBase64},
		{"parity", func(s string) string {
			i := strings.Index(s, "lines=")
			i = strings.Index(s[i:], "\n") + i + 1
			return s[:i] + "/" + s[i+1:]
		}, CheckParity},
		{"uppercase hex", func(s string) string { return strings.Replace(s, "fastxor=", "fastxor=A", 1)[:len(s)] }, CheckGrammar},
		{"missing endwtxt", func(s string) string { return strings.TrimSuffix(s, "endwtxt\n") }, CheckTruncated},
		{"garbage after", func(s string) string { return s + "more\n" }, CheckGrammar},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.mut(good)
			rep, err := Verify(context.Background(), strings.NewReader(in), VerifyOptions{File: "x.wtxt"})
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want *wtxt.Error", err)
			}
			if e.Check != tc.check {
				t.Errorf("check %s, want %s (%v)", e.Check, tc.check, err)
			}
			if !strings.HasPrefix(e.Error(), "x.wtxt:") {
				t.Errorf("error does not name the file: %v", e)
			}
			if e.Line == 0 {
				t.Errorf("error has no line: %v", e)
			}
			if rep == nil {
				t.Fatal("nil report")
			}
			if _, err := New().Decode(context.Background(), strings.NewReader(in), int64(len(in)), decodeOpts()); err == nil {
				t.Error("Decode accepted it")
			}
		})
	}
}

func TestVerifyReportsUnauthenticatedAndAudit(t *testing.T) {
	data := unsignedSmall(t)
	withAudit := bytes.Replace(data, []byte("endwtxt\n"), []byte(`audit kahan=1.1e-15 notes="Sera gamma=0.96"`+"\nendwtxt\n"), 1)
	rep, err := Verify(context.Background(), bytes.NewReader(withAudit), VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Audit == "" || len(rep.Unauthenticated()) != 2 || rep.Signature != SigAbsent || rep.Chain != "first" {
		t.Fatalf("report: audit=%q unauth=%v sig=%s chain=%s", rep.Audit, rep.Unauthenticated(), rep.Signature, rep.Chain)
	}
	if _, err := Verify(context.Background(), bytes.NewReader(data), VerifyOptions{RequireSignature: true}); err == nil {
		t.Fatal("unsigned file passed --require-signature")
	}
	bad := bytes.Replace(data, []byte("endwtxt\n"), []byte("audit nokey\nendwtxt\n"), 1)
	if _, err := Verify(context.Background(), bytes.NewReader(bad), VerifyOptions{}); err == nil {
		t.Fatal("malformed audit accepted")
	}
}

func TestVerifyKeysAndChain(t *testing.T) {
	data, opts := smallSigned(t)
	ctx := context.Background()
	o := opts
	o.TrustedKeys = nil
	o.TrustedKeys = append(o.TrustedKeys, testKey(1).Public().(ed25519.PublicKey))
	if _, err := Verify(ctx, bytes.NewReader(data), o); err == nil || !strings.Contains(err.Error(), "not among the trusted keys") {
		t.Fatalf("untrusted signer: %v", err)
	}
	o = opts
	o.HMACKey = []byte("wrong")
	if _, err := Verify(ctx, bytes.NewReader(data), o); err == nil || !strings.Contains(err.Error(), "hmac") {
		t.Fatalf("wrong HMAC key: %v", err)
	}
	o = opts
	o.PrevMerkle = &[32]byte{8}
	if _, err := Verify(ctx, bytes.NewReader(data), o); err == nil || !strings.Contains(err.Error(), "chain") {
		t.Fatalf("broken chain: %v", err)
	}
}
