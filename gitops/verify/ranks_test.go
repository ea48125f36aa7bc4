package verify

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// rankBlobs is an in-memory blob store of rank parts' segments.
type rankBlobs map[[32]byte][]byte

func (m rankBlobs) OpenBlob(_ context.Context, s wtxt.Segment) (io.ReadCloser, error) {
	b, ok := m[s.Digest]
	if !ok {
		return nil, fmt.Errorf("%s: %w", s.DigestString(), wtxt.ErrBlobNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

var rankTestChain = wranks.ChainID("test-job")

// rankLedger is a bare ledger repository with committed multi-rank
// generations, their parts' blobs, and the keys that signed them.
type rankLedger struct {
	dir       string
	repo      *gitops.Repo
	blobs     rankBlobs
	committer ed25519.PrivateKey
	nodes     []ed25519.PrivateKey
	prev      [32]byte
	// meta, when set, is the metadata rank r's part carries.
	meta func(r int) snapshot.UserMeta
}

func newRankLedger(t *testing.T, world int) *rankLedger {
	l := &rankLedger{dir: filepath.Join(t.TempDir(), "ledger.git"), blobs: rankBlobs{},
		committer: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))}
	for r := range world {
		l.nodes = append(l.nodes, ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(40 + r)}, 32)))
	}
	repo, err := gitops.OpenRepo(l.dir, gitops.Config{SigningKey: l.committer, AuthorEmail: "committer@test"})
	if err != nil {
		t.Fatal(err)
	}
	l.repo = repo
	return l
}

// commit makes generation gen (all ranks at ts) and commits it.
func (l *rankLedger) commit(t *testing.T, gen uint64, ts time.Time) *gitops.Result {
	t.Helper()
	ctx := context.Background()
	var parts []wranks.Part
	var skels [][]byte
	for r, key := range l.nodes {
		b := make([]byte, 64*16*4)
		for i := range 64 * 16 {
			binary.LittleEndian.PutUint32(b[i*4:], uint32(gen)*1000+uint32(r)*100+uint32(i))
		}
		m := snapshot.DefaultMeta()
		m.TS, m.Build = ts, "test"
		s := &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{{Name: fmt.Sprintf("layers.%d.w", r), DType: snapshot.F32, Shape: []int64{64, 16}, Data: snapshot.Bytes(b)}}}
		if l.meta != nil {
			s.UserMeta = l.meta(r)
		}
		var w, sk bytes.Buffer
		if _, err := wranks.EncodePart(ctx, &w, s, wranks.PartOptions{Gen: gen, Chain: rankTestChain, SignKey: key}); err != nil {
			t.Fatal(err)
		}
		if _, err := wtxt.Split(ctx, bytes.NewReader(w.Bytes()), &sk, func(_ context.Context, s wtxt.Segment, b []byte) error {
			l.blobs[s.Digest] = bytes.Clone(b)
			return nil
		}, wtxt.SplitOptions{SegmentSize: 1024}); err != nil {
			t.Fatal(err)
		}
		h, err := wranks.SkeletonHeader(sk.Bytes(), "skel")
		if err != nil {
			t.Fatal(err)
		}
		p := wranks.PartFromHeader(r, h)
		p.Skeleton, p.SkeletonSHA256 = wranks.SkeletonName(r), sha256.Sum256(sk.Bytes())
		p.Manifest = fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(fmt.Sprint(gen, r))))
		parts, skels = append(parts, p), append(skels, sk.Bytes())
	}
	ix, err := wranks.New(fmt.Sprintf("%06d", gen), len(l.nodes), rankTestChain, parts, l.prev, "ranks", l.committer)
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.repo.CommitRanks(ctx, gitops.RanksGeneration{Index: ix, Skeletons: skels})
	if err != nil {
		t.Fatal(err)
	}
	l.prev = ix.MerkleThis
	return res
}

func authorizedKey(k ed25519.PrivateKey) string {
	p, _ := ssh.NewPublicKey(k.Public())
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(p)))
}

func (l *rankLedger) verify(t *testing.T, signers *sshsig.AllowedSigners, o RanksOptions) ([]RanksGeneration, error) {
	t.Helper()
	r, err := git.PlainOpen(l.dir)
	if err != nil {
		t.Fatal(err)
	}
	o.Blobs, o.Signers = l.blobs, signers
	if o.Chain == ([32]byte{}) {
		o.Chain = rankTestChain
	}
	return VerifyRanks(context.Background(), r, o)
}

// TestVerifyRanksAllowedSigners: verify-repo of a multi-rank ledger
// applies the allowed_signers options, in Go. The commit and tag
// signatures: its verdict is asserted to be git verify-commit's; the
// index (committer key) and rank part (node key) signatures, namespace
// "file", only by keys whose lines allow "file" at the commit's time
// (2026-11-24T08:00Z): valid-before past or namespaces="git" alone
// refuse them; a window containing the commit time passes although it
// has ended by now.
func TestVerifyRanksAllowedSigners(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	l := newRankLedger(t, 1)
	l.commit(t, 1, time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC))
	committer, node := authorizedKey(l.committer), authorizedKey(l.nodes[0])
	for _, tc := range []struct {
		name, committer, node string
		wantGit               bool   // git verify-commit accepts the commit
		wantErr               string // "" passes
	}{
		{"plain keys", `committer@test `, `node@test `, true, ""},
		{"namespaces git,file and file", `committer@test namespaces="git,file" `, `node@test namespaces="file" `, true, ""},
		{"committer for files only, expired", `committer@test namespaces="file",valid-before="20000101" `, `node@test `, false, "commit signature"},
		{"committer for git only: index refused", `committer@test namespaces="git" `, `node@test `, true, `namespace "file"`},
		{"node expired", `committer@test `, `node@test valid-before="20000101" `, true, "key has expired"},
		{"node valid at commit time, expired by now", `committer@test `, `node@test valid-after="20261101Z",valid-before="20261125Z" `, true, ""},
		{"node not yet valid", `committer@test `, `node@test valid-after="20261201Z" `, true, "not yet valid"},
		{"node as cert-authority", `committer@test `, `node@test cert-authority `, true, "cert-authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "allowed_signers")
			if err := os.WriteFile(path, []byte(tc.committer+committer+"\n"+tc.node+node+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			signers, err := sshsig.LoadAllowedSigners(path)
			if err != nil {
				t.Fatal(err)
			}
			gitOK := exec.Command("git", "-C", l.dir, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+path, "verify-commit", gitops.DefaultBranch).Run() == nil
			if gitOK != tc.wantGit {
				t.Fatalf("git verify-commit %v, want %v", gitOK, tc.wantGit)
			}
			_, err = l.verify(t, signers, RanksOptions{})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("VerifyRanks: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("VerifyRanks: %v, want an error with %q", err, tc.wantErr)
			case !gitOK && (err == nil || !strings.Contains(err.Error(), "commit signature")):
				t.Fatalf("git refuses the commit, VerifyRanks: %v", err)
			}
		})
	}
}

// TestVerifyRanksChainAndSince: three generations verify; the commit
// and its tag agree with git verify-commit / verify-tag; --since starts
// at a later generation; a commit that is not a multi-rank generation
// fails located.
func TestVerifyRanksChainAndSince(t *testing.T) {
	l := newRankLedger(t, 2)
	for g := uint64(1); g <= 3; g++ {
		l.commit(t, g, time.Date(2026, 11, 24, 8, 0, int(g), 0, time.UTC))
	}
	signers, err := sshsig.Unrestricted(l.committer.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	trusted := []ed25519.PublicKey{l.committer.Public().(ed25519.PublicKey), l.nodes[0].Public().(ed25519.PublicKey), l.nodes[1].Public().(ed25519.PublicKey)}
	gens, err := l.verify(t, signers, RanksOptions{Trusted: trusted})
	if err != nil || len(gens) != 3 || gens[2].Gen != 3 || gens[0].WorldSize != 2 || gens[0].Arrays != 2 || gens[0].Bytes != 2*64*16*4 {
		t.Fatalf("%+v %v", gens, err)
	}
	gens, err = l.verify(t, signers, RanksOptions{Trusted: trusted, Since: "gen-000002"})
	if err != nil || len(gens) != 2 || gens[0].Gen != 2 {
		t.Fatalf("since: %+v %v", gens, err)
	}
	// Another job's chain id.
	if _, err := l.verify(t, signers, RanksOptions{Trusted: trusted, Chain: wranks.ChainID("other")}); err == nil || !strings.Contains(err.Error(), "ranks/chain") {
		t.Fatalf("other chain: %v", err)
	}
	// A node key that is not trusted: the part's signature fails.
	if _, err := l.verify(t, signers, RanksOptions{Trusted: trusted[:2]}); err == nil || !strings.Contains(err.Error(), "signer") {
		t.Fatalf("untrusted node: %v", err)
	}
	// A missing blob: the part does not assemble.
	for k := range l.blobs {
		delete(l.blobs, k)
		break
	}
	if _, err := l.verify(t, signers, RanksOptions{Trusted: trusted}); err == nil {
		t.Fatal("a missing blob verified")
	}
}

// TestVerifyRanksMetaTrailer: a Snapd-Meta trailer on a multi-rank
// generation's commit (here the commit and tag are reworded and
// re-signed by the committer's key) is checked against
// the metadata inside every rank's part, read through its skeleton: equal
// passes; a changed value, a trailer on parts without metadata, a rank
// whose part disagrees and a malformed trailer fail "trailer", naming the
// rank and the keys, never a value. Without a trailer nothing is compared.
func TestVerifyRanksMetaTrailer(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	step := func(n int) snapshot.UserMeta {
		m, err := snapshot.ParseUserMeta([]byte(fmt.Sprintf(`{"step":%d,"loss":0.41}`, n)))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	blk, err := ssh.MarshalPrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)), "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "committer_ed25519")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		meta    func(r int) snapshot.UserMeta // the parts'
		trailer string                        // "": none
		wantErr string                        // "": passes
	}{
		{"parts with metadata, no trailer", func(int) snapshot.UserMeta { return step(300) }, "", ""},
		{"equal", func(int) snapshot.UserMeta { return step(300) }, step(300).String(), ""},
		{"a value changed", func(int) snapshot.UserMeta { return step(300) }, step(301).String(), "rank 0: trailer: commit trailer Snapd-Meta disagrees with the metadata inside the rank's part (keys step)"},
		{"parts without metadata", nil, step(300).String(), "rank 0: trailer: commit trailer Snapd-Meta disagrees with the metadata inside the rank's part (keys loss, step)"},
		{"rank 1 disagrees", func(r int) snapshot.UserMeta { return step(300 + r) }, step(300).String(), "rank-00001.skel: rank 1: trailer: commit trailer Snapd-Meta disagrees with the metadata inside the rank's part (keys step)"},
		{"malformed", func(int) snapshot.UserMeta { return step(300) }, "step=", gitops.TrailerMeta},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newRankLedger(t, 2)
			l.meta = tc.meta
			for g := uint64(1); g <= 2; g++ {
				l.commit(t, g, time.Date(2026, 11, 24, 8, 0, int(g), 0, time.UTC))
			}
			if tc.trailer != "" {
				verifytest.RewordHead(t, l.dir, "gen-000002", func(msg string) string {
					return strings.TrimRight(msg, "\n") + "\n" + gitops.TrailerMeta + ": " + tc.trailer + "\n"
				}, keyFile)
			}
			signers, err := sshsig.Unrestricted(l.committer.Public().(ed25519.PublicKey))
			if err != nil {
				t.Fatal(err)
			}
			trusted := []ed25519.PublicKey{l.committer.Public().(ed25519.PublicKey), l.nodes[0].Public().(ed25519.PublicKey), l.nodes[1].Public().(ed25519.PublicKey)}
			gens, err := l.verify(t, signers, RanksOptions{Trusted: trusted})
			if tc.wantErr == "" {
				if err != nil || len(gens) != 2 {
					t.Fatalf("%d generations verified, %v", len(gens), err)
				}
				return
			}
			var we *wtxt.Error
			if err == nil || !errors.As(err, &we) || string(we.Check) != CheckTrailer || !strings.Contains(err.Error(), tc.wantErr) || len(gens) != 1 {
				t.Fatalf("%d generations verified, %v; want generation 2 failing %s with %q", len(gens), err, CheckTrailer, tc.wantErr)
			}
			if testutil.ContainsValue(err.Error(), "0.41") || testutil.ContainsValue(err.Error(), "301") {
				t.Fatalf("the failure quotes a value: %v", err)
			}
		})
	}
}
