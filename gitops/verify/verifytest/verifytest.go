// Package verifytest builds snapshot repositories for the tests of
// gitops/verify and `snapd verify-repo`: real WTXT generations (wtxt.Encode,
// signed, chained through PrevMerkle, with DELTA v2 files from
// wtxt.MakeDelta, optionally age-armored with a seal) committed with
// gitops.Repo, plus git CLI helpers to forge commits and tags by hand.
package verifytest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/snapshot"
)

// Email is the committer e-mail of the fixtures (gitops' default).
const Email = gitops.DefaultAuthorEmail

// Key is an Ed25519 signing key with its files.
type Key struct {
	Priv ed25519.PrivateKey
	Pub  ed25519.PublicKey
	// PrivFile is the OpenSSH private key (0600), usable as git's
	// user.signingkey with gpg.format=ssh.
	PrivFile string
	// AllowedSigners is an allowed_signers file naming Email for the
	// namespaces "git" (commits, tags) and "file" (WTXT), as snapd keygen
	// writes it.
	AllowedSigners string
}

// NewKey creates a fresh key and its files in a temp dir.
func NewKey(t testing.TB) *Key {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	k := &Key{Priv: priv, Pub: pub, PrivFile: filepath.Join(dir, "sign_ed25519"), AllowedSigners: filepath.Join(dir, "allowed_signers")}
	if err := os.WriteFile(k.PrivFile, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, _ := ssh.NewPublicKey(pub)
	line := fmt.Sprintf("%s namespaces=\"git,file\" %s", Email, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))))
	if err := os.WriteFile(k.AllowedSigners, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return k
}

// Snapshot returns generation gen of a small synthetic model: three f32
// arrays, 8 rows per chunk; each generation after the first changes a few
// rows of "layer0.w" (and of "embed" every other generation).
func Snapshot(gen uint64) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}
	s.Meta.Gen, s.Meta.Build = gen, "verifytest"
	s.Meta.TS = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(gen) * time.Hour)
	add := func(seed uint64, name string, rows, cols int64, changed func(row int64) bool) {
		b := make([]byte, rows*cols*4)
		for r := int64(0); r < rows; r++ {
			for c := int64(0); c < cols; c++ {
				x := seed*0x9e3779b97f4a7c15 + uint64(r*cols+c)*0xbf58476d1ce4e5b9
				if changed(r) {
					x ^= gen * 0x94d049bb133111eb
				}
				x ^= x >> 29
				binary.LittleEndian.PutUint32(b[(r*cols+c)*4:], uint32(x))
			}
		}
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: name, DType: snapshot.F32, Shape: []int64{rows, cols}, Data: snapshot.Bytes(b)})
	}
	add(1, "embed", 256, 64, func(r int64) bool { return gen > 1 && gen%2 == 0 && r == int64(gen*3%256) })
	add(2, "layer0.w", 96, 48, func(r int64) bool { return gen > 1 && (r == int64(gen*5%96) || r == int64(gen*11%96)) })
	add(3, "bias", 1, 48, func(int64) bool { return false })
	return s
}

// SnapshotWith is Snapshot(gen) with the metadata meta(gen) (none when
// meta is nil).
func SnapshotWith(gen uint64, meta func(uint64) snapshot.UserMeta) *snapshot.Snapshot {
	s := Snapshot(gen)
	if meta != nil {
		s.UserMeta = meta(gen)
	}
	return s
}

// StepMeta is a trainer's metadata for generation n: step n×100, a loss
// that falls, and the optimizer's name.
func StepMeta(n uint64) snapshot.UserMeta {
	m, err := snapshot.ParseUserMeta([]byte(fmt.Sprintf(`{"step":%d,"loss":%g,"opt":"adamw"}`, n*100, 1/float64(n+1))))
	if err != nil {
		panic(err) // the literal above is valid metadata
	}
	return m
}

// Encode writes s as a signed WTXT chained to prev (zero for the first).
func Encode(t testing.TB, s *snapshot.Snapshot, key ed25519.PrivateKey, prev [32]byte) ([]byte, *wtxt.Result) {
	t.Helper()
	var b bytes.Buffer
	res, err := wtxt.Encode(context.Background(), &b, s, wtxt.EncodeOptions{SignKey: key, PrevMerkle: prev, RowsPerChunk: 8})
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), res
}

// Delta returns the DELTA v2 from base to target.
func Delta(t testing.TB, base, target []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := wtxt.MakeDelta(context.Background(), &b, bytes.NewReader(base), int64(len(base)), bytes.NewReader(target), int64(len(target))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Options configure Build.
type Options struct {
	Gens      []uint64 // generation numbers; default 1..5
	Layout    gitops.Layout
	PartLimit int64
	// SegmentSize is gitops.Config.SegmentSize (the segments layout).
	SegmentSize int64
	// Encrypt lists generation numbers stored age-armored with a seal.
	Encrypt []uint64
	// Meta, when set, gives generation n's metadata (snapshot.UserMeta,
	// stored in its WTXT and committed as the Snapd-Meta trailer).
	Meta func(n uint64) snapshot.UserMeta
}

// Gen is one generation as built.
type Gen struct {
	Number   uint64
	WTXT     []byte // plaintext
	Stored   []byte // what was committed as current.wtxt (armored when encrypted)
	Result   *wtxt.Result
	Commit   string
	Tag      string
	Files    gitops.Generation // the files given to Repo.Commit
	Header   gitops.Header
	Snapshot *snapshot.Snapshot
}

// Fixture is a bare repository of generations committed by gitops.Repo.
type Fixture struct {
	Dir      string // the bare repository
	Work     string // scratch directory for generation files
	Key      *Key
	Identity *age.X25519Identity
	Gens     []*Gen
	// Meta is Options.Meta: Make gives Snapshot(n) this metadata.
	Meta func(n uint64) snapshot.UserMeta
}

// Build encodes and commits the generations (signed commits and tags).
func Build(t testing.TB, o Options) *Fixture {
	t.Helper()
	if len(o.Gens) == 0 {
		o.Gens = []uint64{1, 2, 3, 4, 5}
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	f := &Fixture{Dir: filepath.Join(t.TempDir(), "repo.git"), Work: t.TempDir(), Key: NewKey(t), Identity: id, Meta: o.Meta}
	r, err := gitops.OpenRepo(f.Dir, gitops.Config{Delta: gitops.DeltaAlways, SigningKey: f.Key.Priv, Layout: o.Layout, PartLimit: o.PartLimit, SplitThreshold: o.PartLimit, SegmentSize: o.SegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	var prev *Gen
	for _, n := range o.Gens {
		g := f.Make(t, n, prev, contains(o.Encrypt, n))
		res, err := r.Commit(context.Background(), g.Files)
		if err != nil {
			t.Fatalf("commit gen %d: %v", n, err)
		}
		g.Commit, g.Tag = res.Commit.String(), res.Tag
		f.Gens = append(f.Gens, g)
		prev = g
	}
	return f
}

func contains(l []uint64, n uint64) bool {
	for _, x := range l {
		if x == n {
			return true
		}
	}
	return false
}

// Make writes generation n's files into f.Work: the WTXT chained to prev
// (nil for the first), a delta from prev's plaintext when prev is given,
// and, when encrypt is set, the armored WTXT and its signed seal.
func (f *Fixture) Make(t testing.TB, n uint64, prev *Gen, encrypt bool) *Gen {
	t.Helper()
	var pm [32]byte
	if prev != nil {
		pm = prev.Result.MerkleThis
	}
	return f.MakeWith(t, SnapshotWith(n, f.Meta), pm, prev, encrypt)
}

// MakeWith is Make for a given snapshot and merkle_prev.
func (f *Fixture) MakeWith(t testing.TB, s *snapshot.Snapshot, pm [32]byte, prev *Gen, encrypt bool) *Gen {
	t.Helper()
	n := s.Meta.Gen
	data, res := Encode(t, s, f.Key.Priv, pm)
	g := &Gen{Number: n, WTXT: data, Stored: data, Result: res, Snapshot: s}
	g.Header = gitops.Header{Gen: n, Root: res.Root}
	name := func(ext string) string { return filepath.Join(f.Work, fmt.Sprintf("g%06d%s", n, ext)) }
	g.Files.WTXT = WriteFile(t, name(".wtxt"), data)
	if prev != nil {
		g.Files.Delta = WriteFile(t, name(".wtxtdelta"), Delta(t, prev.WTXT, data))
	}
	if encrypt {
		armored := f.Armor(t, data)
		g.Stored = armored
		g.Files.WTXT = WriteFile(t, name(".wtxt.age"), armored)
		g.Files.Seal = WriteFile(t, name(".wseal"), f.Seal(t, g, armored))
		h := g.Header
		g.Files.Header = &h
	}
	return g
}

// Armor encrypts data to the fixture's age identity (ASCII armor).
func (f *Fixture) Armor(t testing.TB, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := armor.Encrypt(&b, bytes.NewReader(data), f.Identity.Recipient()); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Seal returns the signed seal line of armored bytes holding g.
func (f *Fixture) Seal(t testing.TB, g *Gen, armored []byte) []byte {
	t.Helper()
	d, err := armor.Scan(bytes.NewReader(armored))
	if err != nil {
		t.Fatal(err)
	}
	s := &armor.Seal{Kind: armor.KindWTXT, Bytes: d.Bytes, SHA256: d.SHA256, Root: g.Result.Root}
	s.Sign(f.Key.Priv)
	return s.Marshal()
}

// WriteFile writes data to p and returns p.
func WriteFile(t testing.TB, p string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Copy returns a copy of the fixture's repository (to tamper with).
func (f *Fixture) Copy(t testing.TB) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy.git")
	if out, err := exec.Command("cp", "-a", f.Dir, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	return dst
}

// Git runs the git CLI in dir with an empty global configuration.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := GitRun(dir, nil, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// GitRun runs git in dir with extra environment entries; it returns the
// combined output.
func GitRun(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "LC_ALL=C",
		"GIT_AUTHOR_NAME=snapd", "GIT_AUTHOR_EMAIL="+Email, "GIT_COMMITTER_NAME=snapd", "GIT_COMMITTER_EMAIL="+Email)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// signArgs returns git -c options that sign with keyFile ("" for none).
func signArgs(keyFile string) []string {
	if keyFile == "" {
		return nil
	}
	return []string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + keyFile}
}

// HandCommit commits files g (as gitops.Repo lays them out, generation.txt
// included, but with no chain or order check) on top of parent in the
// bare repository repo with the git CLI (`git commit-tree`), signed with
// signKey's private key file ("" for unsigned), moves the branch
// "snapshots" to it and (re)creates the generation's annotated tag, signed
// with tagKey ("" for unsigned). It returns the new commit's hash.
func HandCommit(t testing.TB, repo, parent string, g gitops.Generation, signKey, tagKey string) string {
	t.Helper()
	// Let gitops build the tree: a scratch copy without the branch makes
	// Repo.Commit write a root commit whose tree we reuse.
	scratch := filepath.Join(t.TempDir(), "scratch.git")
	if out, err := exec.Command("cp", "-a", repo, scratch).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	Git(t, scratch, "update-ref", "-d", "refs/heads/"+gitops.DefaultBranch)
	for _, tg := range strings.Fields(Git(t, scratch, "tag", "-l")) {
		Git(t, scratch, "tag", "-d", tg)
	}
	r, err := gitops.OpenRepo(scratch, gitops.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Commit(context.Background(), g)
	if err != nil {
		t.Fatal(err)
	}
	tree := strings.TrimSpace(Git(t, scratch, "rev-parse", res.Commit.String()+"^{tree}"))
	raw := Git(t, scratch, "cat-file", "commit", res.Commit.String())
	_, msg, _ := strings.Cut(raw, "\n\n")
	msgFile := WriteFile(t, filepath.Join(t.TempDir(), "msg"), []byte(msg))
	// Copy the objects over and commit in repo.
	Git(t, repo, "fetch", "-q", scratch, "+refs/heads/"+gitops.DefaultBranch+":refs/verifytest/scratch")
	Git(t, repo, "update-ref", "-d", "refs/verifytest/scratch")
	args := append(signArgs(signKey), "commit-tree", tree, "-F", msgFile)
	if parent != "" {
		args = append(args, "-p", parent)
	}
	if signKey != "" {
		args = append(args, "-S")
	}
	commit := strings.TrimSpace(Git(t, repo, args...))
	Git(t, repo, "update-ref", "refs/heads/"+gitops.DefaultBranch, commit)
	tagArgs := append(signArgs(tagKey), "tag", "-f", "-a", "--cleanup=verbatim", "-F", msgFile)
	if tagKey != "" {
		tagArgs = append(tagArgs, "-s")
	}
	Git(t, repo, append(tagArgs, res.Tag, commit)...)
	return commit
}
