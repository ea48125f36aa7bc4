package gitops

import (
	"bytes"
	"compress/zlib"
	"context"
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

// TestWriteWTXTBigLoose: a generation committed as one big loose file or
// as big loose parts is read from its files (looseFS), byte for byte, and
// after git gc packs it through cat-file, the same bytes.
func TestWriteWTXTBigLoose(t *testing.T) {
	dir := t.TempDir()
	chain := genChain(t, dir, 1, []testArray{{name: "w", data: pseudo(1, 3<<20), chunk: 64 << 10}}, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		layout Layout
		dir    string // holding a big blob
	}{{LayoutSingle, "."}, {LayoutSplit, DirWTXTParts}} {
		t.Run(string(tc.layout), func(t *testing.T) {
			r, err := OpenRepo(filepath.Join(dir, string(tc.layout)+".git"), Config{Layout: tc.layout, PartLimit: 2 << 20})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.Commit(ctx, Generation{WTXT: chain.paths[0]})
			if err != nil || res.Layout != tc.layout {
				t.Fatalf("commit: %+v %v", res, err)
			}
			gen, err := r.genDir(res.Tag)
			if err != nil {
				t.Fatal(err)
			}
			if tc.dir != "." {
				if gen, err = gen.Tree(tc.dir); err != nil {
					t.Fatal(err)
				}
			}
			name := ""
			for _, e := range gen.Entries {
				if b, err := r.r.BlobObject(e.Hash); err == nil && b.Size > looseMin {
					name = e.Name
				}
			}
			if name == "" {
				t.Fatalf("no blob above %d bytes in %s", looseMin, tc.dir)
			}
			fsys, done := r.blobFS(ctx, gen)
			f, err := fsys.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := f.(*treeFile).ReadCloser.(*looseReader); !ok {
				t.Errorf("%s: not read from its loose file", name)
			}
			f.Close()
			done()
			for _, when := range []string{"loose", "packed"} {
				if when == "packed" {
					gitCmd(t, r.Dir(), "gc", "-q")
					if r, err = OpenExisting(r.Dir(), Config{}); err != nil {
						t.Fatal(err)
					}
				}
				var out bytes.Buffer
				if err := r.WriteWTXT(res.Tag, &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[0]) {
					t.Fatalf("%s: WriteWTXT: %v (equal %v)", when, err, bytes.Equal(out.Bytes(), chain.data[0]))
				}
			}
		})
	}
}
