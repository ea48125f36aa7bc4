package formats_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/aero"
	"github.com/snapd-ml/snapd/formats/fold"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/stb"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/ztensor"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// marker stands for a secret: it must never appear in an error.
const marker = testutil.SecretMarker

func codecs() []formats.Codec {
	return []formats.Codec{wtxt.New(), safetensors.New(), ztensor.New(), stb.New(), fold.New(), aero.New()}
}

// secretFiles are files holding the marker where a decoder may look: key
// files of every kind snapd handles (named through a symlink with a
// checkpoint extension, a request makes the daemon decode them), and each
// format's magic followed by the secret, so that decoders get past their
// first check.
func secretFiles() map[string][]byte {
	m := map[string][]byte{
		"openssh key":   []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n" + marker + "b3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"),
		"hmac hex":      []byte(marker + "0123456789abcdef0123456789abcdef\n"),
		"age identity":  []byte("# created: 2026-01-01\nAGE-SECRET-KEY-1" + marker + "\n"),
		"github token":  []byte("ghp_" + marker + "\n"),
		"pem":           []byte("-----BEGIN RSA PRIVATE KEY-----\n" + marker + "\n-----END RSA PRIVATE KEY-----\n"),
		"bare":          []byte(marker),
		"marker first8": []byte(marker[:8]),
	}
	for _, magic := range []string{"ZTEN1000", "FOLDv1\x00\x00", "AERO", "STB0", "WTXT 1.1\n", "# WTXT", "\x93NUMPY"} {
		m["magic "+strings.TrimSpace(magic)] = []byte(magic + marker + strings.Repeat(marker, 8))
	}
	// A safetensors header whose strings are the secret.
	for name, hdr := range map[string]string{
		"st dtype": `{"a":{"dtype":"` + marker + `","shape":[1],"data_offsets":[0,1]}}`,
		"st field": `{"a":{"` + marker + `":1}}`,
		"st value": `{"a":"` + marker + `"}`,
		"st meta":  `{"__metadata__":{"k":1,"` + marker + `":2}}`,
		"st json":  `{"a":` + marker + `}`,
	} {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
		m[name] = append(append(b, hdr...), 0)
	}
	return m
}

// TestErrorsNeverEchoContent: Every codec, and the
// registry's detection, describe what is wrong with a file (length,
// offsets, "not a known format") without quoting its bytes.
func TestErrorsNeverEchoContent(t *testing.T) {
	ctx := context.Background()
	reg := formats.NewRegistry(codecs()...)
	for name, b := range secretFiles() {
		if _, err := reg.Detect("key.safetensors", bytes.NewReader(b), int64(len(b))); err != nil {
			checkNoEcho(t, "detect "+name, err, b)
		}
		if _, err := reg.Sniff(b); err != nil {
			checkNoEcho(t, "sniff "+name, err, b)
		}
		for _, c := range codecs() {
			_, err := c.Decode(ctx, snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: "key.bin"})
			if err == nil {
				t.Errorf("%s decoded %s", c.Name(), name)
				continue
			}
			checkNoEcho(t, c.Name()+" "+name, err, b)
		}
	}
}

// checkNoEcho fails when err quotes the secret or any 8-byte run of b
// (escaped or not).
func checkNoEcho(t *testing.T, what string, err error, b []byte) {
	t.Helper()
	msg := err.Error()
	for _, s := range testutil.SecretForms() {
		if strings.Contains(msg, s) {
			t.Errorf("%s: error quotes the file's secret: %s", what, msg)
			return
		}
	}
}
