package verify

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/gittest"
)

// resumedRepo commits generations 1..3, then 3' resumed from 2 and 4'.
func resumedRepo(t *testing.T) (*git.Repository, ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r, err := gitops.OpenRepo(filepath.Join(dir, "r.git"), gitops.Config{SigningKey: key})
	if err != nil {
		t.Fatal(err)
	}
	mt := map[string]string{}
	commit := func(name string, gen uint64, prev string, v byte, res *gitops.Resume) {
		d := gittest.Pseudo(1, 2000)
		d[0] = v
		data, m := gittest.WTXT(gen, mt[prev], []gittest.Array{{Name: "w", Data: d}})
		mt[name] = m
		p := filepath.Join(dir, name+".wtxt")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Commit(context.Background(), gitops.Generation{WTXT: p, Resume: res}); err != nil {
			t.Fatal(err)
		}
	}
	commit("g1", 1, "", 1, nil)
	commit("g2", 2, "g1", 2, nil)
	commit("g3", 3, "g2", 3, nil)
	commit("g3r", 3, "g2", 30, &gitops.Resume{From: 2})
	commit("g4r", 4, "g3r", 40, nil)
	g, err := git.PlainOpen(r.Dir())
	if err != nil {
		t.Fatal(err)
	}
	return g, pub, key
}

// checks returns "gen:check" for every failure of the listed checks.
func checks(rep *Report, names ...string) string {
	var out []string
	for _, f := range rep.AllFailures() {
		for _, n := range names {
			if f.Check == n {
				out = append(out, f.Gen+":"+f.Check)
			}
		}
	}
	return strings.Join(out, " ")
}

// rewrite stores a copy of c with another parent and message, signed with
// key (unsigned when nil), and returns its hash.
func rewrite(t *testing.T, r *git.Repository, c *object.Commit, parent plumbing.Hash, msg string, key ed25519.PrivateKey) plumbing.Hash {
	t.Helper()
	n := *c
	n.ParentHashes = []plumbing.Hash{parent}
	n.Message = msg
	n.PGPSignature = ""
	if key != nil {
		o := &plumbing.MemoryObject{}
		if err := n.EncodeWithoutSignature(o); err != nil {
			t.Fatal(err)
		}
		rd, _ := o.Reader()
		sig, err := gitops.Signer{Key: key}.Sign(rd)
		if err != nil {
			t.Fatal(err)
		}
		n.PGPSignature = string(sig)
	}
	o := r.Storer.NewEncodedObject()
	if err := n.Encode(o); err != nil {
		t.Fatal(err)
	}
	h, err := r.Storer.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestResumeRecords(t *testing.T) {
	r, pub, key := resumedRepo(t)
	run := func(branch string) *Report {
		t.Helper()
		rep, err := Verify(context.Background(), r, Options{Branch: branch, TrustedKeys: []ed25519.PublicKey{pub}})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := run("snapshots")
	var got []string
	for _, g := range rep.Generations {
		got = append(got, fmt.Sprintf("%s:%s:%v", g.Gen, g.Chain, g.Abandoned))
	}
	if s := strings.Join(got, " "); s != "000001:first:false 000002:continues:false 000003:continues:true 000002:resumed:false 000003:continues:false 000004:continues:false" {
		t.Fatalf("generations: %s", s)
	}
	if c := checks(rep, CheckResume, CheckChain, CheckGenOrder, CheckCommitSig, CheckTag, CheckTrailer); c != "" {
		t.Fatalf("failures on a declared resume: %s\n%+v", c, rep.AllFailures())
	}
	if tags := rep.Generations[4].Tag; tags != "gen-000003-r1" {
		t.Fatalf("re-used tag %s", tags)
	}

	// The commits of the good history, oldest first.
	var hist []*object.Commit
	head, _ := r.Reference(plumbing.NewBranchReferenceName("snapshots"), true)
	for c, _ := r.CommitObject(head.Hash()); c != nil; {
		hist = append([]*object.Commit{c}, hist...)
		if len(c.ParentHashes) == 0 {
			break
		}
		c, _ = r.CommitObject(c.ParentHashes[0])
	}
	g3, rec, g3r := hist[2], hist[3], hist[4]
	branch := func(name string, h plumbing.Hash) {
		if err := r.Storer.SetReference(plumbing.NewHashReference(plumbing.NewBranchReferenceName(name), h)); err != nil {
			t.Fatal(err)
		}
	}

	// Undeclared fork: 3' directly on 3.
	branch("fork", rewrite(t, r, g3r, g3.Hash, g3r.Message, key))
	if c := checks(run("fork"), CheckGenOrder, CheckChain); c != "000003:gen-order 000003:chain" {
		t.Fatalf("undeclared fork: %q", c)
	}
	// An unsigned record.
	branch("unsigned", rewrite(t, r, rec, g3.Hash, rec.Message, nil))
	if c := checks(run("unsigned"), CheckCommitSig, CheckResume); c != "000002:commit-signature" {
		t.Fatalf("unsigned record: %q", c)
	}
	// A signed record whose abandoned range is wrong, and one naming an
	// abandoned generation.
	branch("range", rewrite(t, r, rec, g3.Hash, strings.Replace(rec.Message, "Snapd-Abandoned: 000003..000003", "Snapd-Abandoned: 000003..000004", 1), key))
	if c := checks(run("range"), CheckResume); c != "000002:resume" {
		t.Fatalf("wrong abandoned range: %q", c)
	}
	branch("named", rewrite(t, r, rec, g3.Hash, strings.Replace(rec.Message, hist[1].Hash.String(), g3.Hash.String(), 1), key))
	if c := checks(run("named"), CheckResume); c != "000002:resume" {
		t.Fatalf("record naming another commit: %q", c)
	}
}
