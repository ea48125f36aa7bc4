package torch

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// fuzzStorages is how many storages (data/0 .. data/15, 64 bytes each)
// the fuzzer's pickles can name.
const fuzzStorages = 16

// wrapPickle puts a pickle into a torch zip next to small storages, so
// that the fuzzer mutates the pickle reader's input directly.
func wrapPickle(pkl []byte) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Store})
	w.Write(pkl)
	st := make([]byte, 64)
	for i := range st {
		st[i] = byte(i * 37)
	}
	for i := 0; i < fuzzStorages; i++ {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: "archive/data/" + strconv.Itoa(i), Method: zip.Store})
		w.Write(st)
	}
	zw.Close()
	return buf.Bytes()
}

// FuzzDecode feeds Decode whole files (inputs starting like a torch zip
// or legacy file) and bare pickles (wrapped as data.pkl of a zip with 16
// small storages). Nothing may panic; what decodes must be readable,
// encode, decode back to the same snapshot and re-encode to the same
// bytes.
func FuzzDecode(f *testing.F) {
	for _, b := range formatstest.Seeds(f, "testdata/*.pt", "testdata/torch2/*.pt") {
		f.Add(b)
		if zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b))); err == nil {
			for _, m := range zr.File {
				if strings.HasSuffix(m.Name, "/data.pkl") {
					rc, _ := m.Open()
					pkl, _ := io.ReadAll(rc)
					rc.Close()
					f.Add(pkl)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		in := raw
		if !bytes.HasPrefix(raw, zipMagic) && !bytes.HasPrefix(raw, legacyMagic) {
			in = wrapPickle(raw)
		}
		ctx := context.Background()
		// A small expansion budget: stride-0 views of up to 64 MiB (the
		// default slack) are valid but make each execution slow.
		c := &Codec{ExpandSlack: 1 << 16}
		s, err := c.Decode(ctx, snapshot.Bytes(in), int64(len(in)), formats.DecodeOptions{Name: "fuzz.pt"})
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("decoded snapshot invalid: %v", err)
		}
		for _, a := range s.Arrays {
			if _, err := snapshot.ReadAll(a.Data); err != nil {
				t.Fatalf("%s: %v", a.Name, err)
			}
		}
		var pt bytes.Buffer
		if err := c.Encode(ctx, &pt, s, formats.EncodeOptions{}); err != nil {
			t.Fatalf("decoded but cannot encode: %v", err)
		}
		// The same file name: a verbatim file records it (torch.file).
		s2, err := c.Decode(ctx, snapshot.Bytes(pt.Bytes()), int64(pt.Len()), formats.DecodeOptions{Name: "fuzz.pt"})
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		formatstest.EqualSorted(t, s, s2)
		var pt2 bytes.Buffer
		if err := c.Encode(ctx, &pt2, s2, formats.EncodeOptions{}); err != nil || !bytes.Equal(pt.Bytes(), pt2.Bytes()) {
			t.Fatalf("re-encode differs (%v)", err)
		}
	})
}
