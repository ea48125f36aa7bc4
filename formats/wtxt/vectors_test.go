package wtxt

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/keys"
)

// vectorsDir holds the conformance vectors written by an independent
// implementation of the profile (../shared/spec/vectors).
const vectorsDir = "../../../shared/spec/vectors"

func readVector(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorsDir, name))
	if err != nil {
		t.Fatalf("conformance vector: %v", err)
	}
	return b
}

func TestVerifyVectors(t *testing.T) {
	pubs, err := keys.LoadPublicKeys(filepath.Join(vectorsDir, "keys/sign_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	hmacKey := vectorHMACKey(t)
	for _, tc := range []struct {
		file, wsum string
		signed     bool
	}{
		{"v1-basic-unsigned.wtxt", "", false},
		{"v1-basic-signed.wtxt", "", true},
		{"v2-ext-signed.wtxt", "", true},
		{"v3-stream.wtxt", "v3-stream.wsum", true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			opts := VerifyOptions{File: tc.file, TrustedKeys: pubs, HMACKey: hmacKey, RequireSignature: tc.signed, AllowUnsigned: !tc.signed}
			if tc.wsum != "" {
				opts.WSUM = readVector(t, tc.wsum)
			}
			rep, err := Verify(context.Background(), bytes.NewReader(readVector(t, tc.file)), opts)
			if err != nil {
				for _, f := range rep.Failures {
					t.Log(f)
				}
				t.Fatal(err)
			}
			if tc.signed && rep.Signature != SigVerified {
				t.Errorf("signature %s", rep.Signature)
			}
			for _, a := range rep.Arrays {
				if tc.signed && a.HMAC != HMACVerified {
					t.Errorf("array %s hmac %s", a.Name, a.HMAC)
				}
			}
		})
	}
}

func vectorHMACKey(t testing.TB) []byte {
	t.Helper()
	b := readVector(t, "keys/hmac.key")
	k, err := keys.ParseHMACKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// vectorCase is one conformance vector and the writer options that make it.
type vectorCase struct {
	file, wsum   string
	signed       bool
	prevFrom     string // vector whose merkle_this is merkle_prev
	rowsPerChunk int
}

var vectorCases = []vectorCase{
	{file: "v1-basic-unsigned.wtxt"},
	{file: "v1-basic-signed.wtxt", signed: true, prevFrom: "v1-basic-unsigned.wtxt"},
	{file: "v2-ext-signed.wtxt", signed: true},
	{file: "v3-stream.wtxt", wsum: "v3-stream.wsum", signed: true, prevFrom: "v2-ext-signed.wtxt", rowsPerChunk: 3},
}

func vectorOptions(t testing.TB, tc vectorCase) EncodeOptions {
	t.Helper()
	opts := EncodeOptions{RowsPerChunk: tc.rowsPerChunk, Stream: tc.wsum != ""}
	if tc.signed {
		k, err := keys.ParseSigner(readVector(t, "keys/sign_ed25519"))
		if err != nil {
			t.Fatal(err)
		}
		opts.SignKey = k
		opts.HMACKey = vectorHMACKey(t)
	}
	if tc.prevFrom != "" {
		h, err := ReadHeader(bytes.NewReader(readVector(t, tc.prevFrom)))
		if err != nil {
			t.Fatal(err)
		}
		opts.PrevMerkle = h.MerkleThis
	}
	return opts
}

// TestReencodeVectors decodes each vector and encodes it again with the
// parameters the vectors README gives: the bytes must be identical.
func TestReencodeVectors(t *testing.T) {
	for _, tc := range vectorCases {
		t.Run(tc.file, func(t *testing.T) {
			want := readVector(t, tc.file)
			s, err := New().Decode(context.Background(), bytes.NewReader(want), int64(len(want)), formats.DecodeOptions{Name: tc.file})
			if err != nil {
				t.Fatal(err)
			}
			for _, workers := range []int{1, 3} {
				opts := vectorOptions(t, tc)
				opts.Workers = workers
				var buf bytes.Buffer
				res, err := Encode(context.Background(), &buf, s, opts)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf.Bytes(), want) {
					t.Fatalf("workers=%d: re-encoded bytes differ from the vector at offset %d", workers, firstDiff(buf.Bytes(), want))
				}
				if tc.wsum != "" && !bytes.Equal(res.WSUM, readVector(t, tc.wsum)) {
					t.Fatalf("WSUM differs:\n got %s\nwant %s", res.WSUM, readVector(t, tc.wsum))
				}
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func decodeOpts() formats.DecodeOptions { return formats.DecodeOptions{Name: "test.wtxt"} }
