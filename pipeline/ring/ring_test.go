package ring

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"filippo.io/age"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
)

// recFS records every Create and fails those for which fail reports true
// with ENOSPC, after the file was created (as a full disk does).
type recFS struct {
	mu    sync.Mutex
	paths []string
	fail  func(path string) bool
}

func (f *recFS) Create(path string, perm os.FileMode) (AtomicFile, error) {
	f.mu.Lock()
	f.paths = append(f.paths, path)
	fail := f.fail != nil && f.fail(path)
	f.mu.Unlock()
	af, err := OSFS{}.Create(path, perm)
	if err != nil || !fail {
		return af, err
	}
	return fullFile{af}, nil
}

func (f *recFS) created() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.paths)
}

// fullFile accepts nothing: every write fails with ENOSPC.
type fullFile struct{ AtomicFile }

func (f fullFile) Writer() io.Writer { return f }
func (f fullFile) Write(p []byte) (int, error) {
	return 0, &os.PathError{Op: "write", Path: "ring", Err: syscall.ENOSPC}
}

func newWriter(t *testing.T, fs FS) *Writer {
	t.Helper()
	w := NewWriter(filepath.Join(t.TempDir(), "ring"), fs, nil)
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	return w
}

func fillWith(b []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := w.Write(b); return err }
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

var wtxtBytes = []byte("WTXT 1\n" + strings.Repeat("payload line\n", 100))

// Plaintext ring: the WTXT is committed in the background (readable
// through PlainFile meanwhile), the WSUM and a kept delta land under
// their names, a delta no smaller than its limit is removed again, and
// List, Lookup, Trim and Remove see the layout.
func TestPlainGeneration(t *testing.T) {
	fs := &recFS{}
	w := newWriter(t, fs)
	for gen := uint64(1); gen <= 3; gen++ {
		g := w.Begin(gen, Options{})
		if g.Encrypted() || g.PlainPath() != g.WTXTPath() || g.WTXTPath() != filepath.Join(w.Dir(), "gen-00000"+string('0'+rune(gen))+".wtxt") {
			t.Fatalf("gen %d: paths %s %s", gen, g.PlainPath(), g.WTXTPath())
		}
		if err := g.WriteWTXT(fillWith(wtxtBytes), gen > 1); err != nil {
			t.Fatal(err)
		}
		if gen > 1 {
			f := g.PlainFile()
			if f == nil {
				t.Fatal("async write without a read descriptor")
			}
			got, err := io.ReadAll(f)
			if err != nil || !bytes.Equal(got, wtxtBytes) {
				t.Fatalf("content through PlainFile: %v", err)
			}
		}
		done, commitErr := g.CommitDone()
		<-done // also for a synchronous write: closed at once
		if err := commitErr(); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(g.PlainPath()); err != nil || !bytes.Equal(b, wtxtBytes) {
			t.Fatalf("gen %d: not under its name after CommitDone: %v", gen, err)
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if g.PlainFile() != nil {
			t.Fatal("descriptor still open after Wait")
		}
		if p, err := g.WriteWSUM([]byte("WSUM 1\n")); err != nil || p != w.Path(gen, ExtWSUM) {
			t.Fatalf("wsum %q %v", p, err)
		}
		limit := int64(100) // gen 2's delta is kept, gen 3's is too big
		if gen == 3 {
			limit = 5
		}
		d, err := g.WriteDelta(fillWith([]byte("DELTA 2\n")), limit)
		if err != nil || d.Bytes != 8 {
			t.Fatalf("delta %+v %v", d, err)
		}
		if (d.Path != "") != (gen < 3) {
			t.Fatalf("gen %d: delta kept %q with limit %d", gen, d.Path, limit)
		}
		if err := g.SealDelta(d.Path); err != nil {
			t.Fatal(err)
		}
		g.Committed(gen - 1)
		g.Close()
	}
	for _, p := range fs.created() {
		if strings.HasSuffix(p, ExtSeal) {
			t.Fatalf("plaintext ring wrote a seal: %s", p)
		}
	}
	fl := w.Lookup(2)
	if fl.WTXT == "" || fl.WTXTBytes != int64(len(wtxtBytes)) || fl.Delta == "" || fl.DeltaBytes != 8 || fl.WSUM == "" || fl.Seal != "" {
		t.Fatalf("lookup gen 2: %+v", fl)
	}
	if fl := w.Lookup(3); fl.Delta != "" {
		t.Fatalf("gen 3's oversized delta kept: %+v", fl)
	}
	ents, err := w.List()
	if err != nil || len(ents) != 3 || ents[1].Gen != 2 || len(ents[1].Files) != 3 || ents[2].Delta != "" {
		t.Fatalf("list: %+v %v", ents, err)
	}
	w.Trim(1, func(gen uint64) bool { return gen == 2 })
	ents, _ = w.List()
	if len(ents) != 2 || ents[0].Gen != 2 || ents[1].Gen != 3 {
		t.Fatalf("after trim keeping 1, protecting gen 2: %+v", ents)
	}
	if err := w.Remove(2); err != nil {
		t.Fatal(err)
	}
	if err := w.Remove(2); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if got := names(t, w.Dir()); !slices.Equal(got, []string{"gen-000003.wsum", "gen-000003.wtxt"}) {
		t.Fatalf("files left: %v", got)
	}
}

// Encrypted ring: the plaintext goes to .plain (0600), the WTXT, WSUM and
// delta are armor that decrypts back, each with a signed seal that
// matches its file; Committed drops the previous plaintext copy; every
// file, seals and Put included, went through the FS.
func TestEncryptedGeneration(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(nil)
	fs := &recFS{}
	w := newWriter(t, fs)
	opts := Options{Recipients: []age.Recipient{id.Recipient()}, SignKey: key}
	for gen := uint64(1); gen <= 2; gen++ {
		g := w.Begin(gen, opts)
		if !g.Encrypted() || g.PlainPath() != PlainPath(w.Dir(), gen) || g.BasePath(gen-1) != PlainPath(w.Dir(), gen-1) {
			t.Fatalf("paths %s %s", g.PlainPath(), g.BasePath(gen-1))
		}
		if err := g.WriteWTXT(fillWith(wtxtBytes), true); err != nil {
			t.Fatal(err)
		}
		if g.PlainFile() != nil {
			t.Fatal("encrypted plaintext committed in the background")
		}
		if st, err := os.Stat(g.PlainPath()); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("plaintext copy: %v %v", st, err)
		}
		v := armor.Seal{Root: wtxt.Root{Gen: "00000" + string('0'+rune(gen)), TS: "2026-01-01T00:00:00Z", Build: "b", SHA256All: [32]byte{byte(gen)}}}
		v.MerkleThis = wtxt.Merkle(v.MerklePrev, v.SHA256All, v.TS, v.Gen, v.Build)
		g.SetSeal(v)
		seal, err := g.Armor()
		if err != nil || seal != g.WTXTPath()+ExtSeal {
			t.Fatalf("armor: %q %v", seal, err)
		}
		if _, err := g.WriteWSUM([]byte("WSUM 1\n")); err != nil {
			t.Fatal(err)
		}
		d, err := g.WriteDelta(fillWith([]byte("DELTA 2\n")), 1<<20)
		if err != nil || d.Path == "" {
			t.Fatalf("delta %+v %v", d, err)
		}
		if err := g.SealDelta(d.Path); err != nil {
			t.Fatal(err)
		}
		if err := w.Put(filepath.Join(filepath.Dir(w.Dir()), "state"), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		g.Committed(gen - 1)
		g.Close()

		for ext, want := range map[string][]byte{ExtWTXT: wtxtBytes, ExtWSUM: []byte("WSUM 1\n"), ExtDelta: []byte("DELTA 2\n")} {
			p := w.Path(gen, ext)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			r, err := armor.Decrypt(bytes.NewReader(b), id)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: decrypts to %q, %v", p, got, err)
			}
			sb, err := os.ReadFile(armor.SealPath(p))
			if err != nil {
				t.Fatal(err)
			}
			s, err := armor.ParseSeal(sb)
			if err != nil {
				t.Fatal(err)
			}
			dg, err := armor.Scan(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Verify(dg, armor.VerifyOptions{Trusted: []ed25519.PublicKey{pub}, RequireSignature: true}); err != nil {
				t.Fatalf("%s: seal: %v", p, err)
			}
		}
	}
	if _, err := os.Stat(PlainPath(w.Dir(), 1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("gen 1's plaintext kept after gen 2 was committed: %v", err)
	}
	created := fs.created()
	for _, want := range []string{w.Path(2, ExtWTXT+ExtSeal), w.Path(2, ExtWSUM+ExtSeal), w.Path(2, ExtDelta+ExtSeal), filepath.Join(filepath.Dir(w.Dir()), "state")} {
		if !slices.Contains(created, want) {
			t.Fatalf("%s was not written through the FS: %v", want, created)
		}
	}
}

// A full disk while writing a seal (or a Put) fails the call with an error
// wrapping ENOSPC and leaves nothing under the seal's name.
func TestFaultsReachSealsAndPut(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	fs := &recFS{fail: func(p string) bool { return strings.HasSuffix(p, ExtSeal) || filepath.Base(p) == "state" }}
	w := newWriter(t, fs)
	g := w.Begin(1, Options{Recipients: []age.Recipient{id.Recipient()}})
	defer g.Close()
	if err := g.WriteWTXT(fillWith(wtxtBytes), false); err != nil {
		t.Fatal(err)
	}
	_, err := g.Armor()
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "write seal") {
		t.Fatalf("armor on a full disk: %v", err)
	}
	if _, err := os.Stat(g.WTXTPath() + ExtSeal); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("seal visible after a failed write: %v", err)
	}
	if _, err := g.WriteWSUM([]byte("WSUM 1\n")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("wsum seal on a full disk: %v", err)
	}
	state := filepath.Join(filepath.Dir(w.Dir()), "state")
	if err := w.Put(state, []byte("{}\n"), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("put on a full disk: %v", err)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state visible after a failed write: %v", err)
	}
	for _, n := range names(t, filepath.Dir(w.Dir())) {
		if strings.Contains(n, "tmp") {
			t.Fatalf("temp file left: %s", n)
		}
	}
	if _, err := w.Begin(2, Options{}).Armor(); err == nil {
		t.Fatal("Armor without recipients accepted")
	}
}
