package gitops

import (
	"bytes"
	"compress/zlib"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestOpenLoose: a big loose blob streams with the size of its header; a
// header that is not a blob's, content shorter or longer than the header
// states, or a bad Adler-32 is an error; a small or absent loose file is
// not taken (ok=false), so the caller reads the blob another way.
func TestOpenLoose(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef"), looseMin/16+100)
	zl := func(header string, body []byte) []byte {
		var b bytes.Buffer
		zw, _ := zlib.NewWriterLevel(&b, zlib.NoCompression)
		zw.Write([]byte(header))
		zw.Write(body)
		zw.Close()
		return b.Bytes()
	}
	good := zl("blob "+itoa(len(content))+"\x00", content)
	badSum := bytes.Clone(good)
	badSum[len(badSum)-1] ^= 1
	for _, tc := range []struct {
		name    string
		file    []byte
		ok      bool
		wantErr string
	}{
		{"good", good, true, ""},
		{"absent", nil, false, ""},
		{"small", zl("blob 3\x00", []byte("abc")), false, ""},
		{"tree", zl("tree "+itoa(len(content))+"\x00", content), false, "not a blob header"},
		{"short", zl("blob "+itoa(len(content)+1)+"\x00", content), true, "unexpected EOF"},
		{"long", zl("blob "+itoa(len(content)-1)+"\x00", content), true, "longer than its header"},
		{"checksum", badSum, true, "checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objects := t.TempDir()
			h := plumbing.NewHash("ab" + strings.Repeat("cd", 19))
			if tc.file != nil {
				p := filepath.Join(objects, "ab", strings.Repeat("cd", 19))
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, tc.file, 0o444); err != nil {
					t.Fatal(err)
				}
			}
			rc, size, ok, err := openLoose(objects, h)
			if !ok {
				if tc.ok || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
					t.Fatalf("openLoose: ok=false, %v; want ok=%v, error %q", err, tc.ok, tc.wantErr)
				}
				return
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if tc.wantErr == "" {
				if err != nil || size != int64(len(content)) || !bytes.Equal(got, content) {
					t.Fatalf("read: %v, size %d, %d bytes, equal %v", err, size, len(got), bytes.Equal(got, content))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("read: error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
