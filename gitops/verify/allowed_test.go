package verify

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
)

// allowedCase is one allowed_signers file of the agreement table: KEY is
// replaced by the signing key, CA by the certificate authority's key.
type allowedCase struct {
	name, lines string
	// wantGit: git verify-commit and verify-tag accept the signatures
	// (asserted against git itself too); wantFile: the WTXT signature
	// (namespace "file", at the commit time) is accepted.
	wantGit, wantFile bool
}

// TestAllowedSignersAgreeWithGit: verify-repo's verdicts on the commit
// and tag signatures of a generation committed at 2026-03-01T01:00Z
// agree with git verify-commit and git verify-tag (gpg.format=ssh,
// gpg.ssh.allowedSignersFile) for every allowed_signers file of the
// table: options are applied at the committer and tagger time, as git
// does; the WTXT signature is checked for namespace "file" at the
// commit's time. The certificate cases run on a copy whose commit and
// tag are signed by a user certificate for the same key.
func TestAllowedSignersAgreeWithGit(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1}})
	e := verifytest.Email
	plain := []allowedCase{
		{"plain key", e + " KEY", true, true},
		{"namespaces match", e + ` namespaces="git,file" KEY`, true, true},
		{"namespaces git only", e + ` namespaces="git" KEY`, true, false},
		{"namespaces mismatch", e + ` namespaces="file" KEY`, false, true},
		{"namespaces wildcard", e + ` namespaces="g*,fil?" KEY`, true, true},
		{"expired long ago, file only", e + ` namespaces="file",valid-before="20000101" KEY`, false, false},
		{"valid-before past", e + ` valid-before="20000101" KEY`, false, false},
		{"valid-after future", e + ` valid-after="20990101" KEY`, false, false},
		{"window containing commit time", e + ` valid-after="20260201",valid-before="20260401" KEY`, true, true},
		{"window ends before commit time (UTC)", e + ` valid-after="20260201Z",valid-before="202603010059Z" KEY`, false, false},
		{"window edge: valid-before is inclusive", e + ` valid-before="20260301010000Z" KEY`, true, true},
		{"expired by now, valid at commit time", e + ` valid-before="20260601" KEY`, true, true},
		{"quoted options, mixed case keywords", e + ` Namespaces="git,file",VALID-AFTER="20260101" KEY trailing comment`, true, true},
		{"quoted principal", `"` + e + `" KEY`, true, true},
		{"multiple principals", "someone@else," + e + " KEY", true, true},
		{"wildcard principal", "*@localhost KEY", true, true},
		{"first line expired, second valid", e + ` valid-before="20000101" KEY` + "\n" + e + " KEY", true, true},
		{"cert-authority line for a plain signature", "*@localhost cert-authority KEY", false, false},
		{"other key only", e + " OTHER", false, false},
	}
	runAllowedTable(t, f, f.Dir, f.Key.Pub, nil, plain)

	// A copy whose commit and tag are signed through a user certificate.
	ca := newSigner(t)
	cert := &ssh.Certificate{Key: sshPub(t, f.Key.Pub), CertType: ssh.UserCert, KeyId: "verifytest", ValidPrincipals: []string{e}, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	expired := &ssh.Certificate{Key: sshPub(t, f.Key.Pub), CertType: ssh.UserCert, KeyId: "old", ValidPrincipals: []string{e},
		ValidBefore: uint64(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC).Unix())}
	if err := expired.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	caLine := ssh.MarshalAuthorizedKey(ca.PublicKey())
	certCases := []allowedCase{
		{"cert-authority for the certificate's principal", "*@localhost cert-authority CA", true, false},
		{"cert-authority, principal not in the certificate", "other@localhost cert-authority CA", false, false},
		{"cert-authority, namespaces mismatch", e + ` cert-authority,namespaces="file" CA`, false, false},
		{"cert-authority valid at commit time", e + ` cert-authority,valid-after="20260101" CA`, true, false},
		{"cert-authority, line expired", e + ` cert-authority,valid-before="20000101" CA`, false, false},
		{"plain line for the certificate's key", e + " KEY", false, true},
		{"CA key without cert-authority", e + " CA", false, false},
	}
	for _, c := range []struct {
		name string
		cert *ssh.Certificate
		ok   bool // the certificate is valid at the commit time
	}{{"cert", cert, true}, {"expired cert", expired, false}} {
		t.Run(c.name, func(t *testing.T) {
			repo := f.Copy(t)
			resign(t, repo, f.Gens[0], f.Key.Priv, c.cert)
			cases := certCases
			if !c.ok {
				cases = nil
				for _, tc := range certCases {
					if strings.Contains(tc.lines, "cert-authority") {
						tc.wantGit = false
					}
					cases = append(cases, tc)
				}
			}
			runAllowedTable(t, f, repo, f.Key.Pub, caLine, cases)
		})
	}
}

func runAllowedTable(t *testing.T, f *verifytest.Fixture, repo string, key ed25519.PublicKey, caLine []byte, cases []allowedCase) {
	other := newSigner(t)
	keyLine := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub(t, key))))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.NewReplacer("KEY", keyLine, "OTHER", strings.TrimSpace(string(ssh.MarshalAuthorizedKey(other.PublicKey()))),
				"CA", strings.TrimSpace(string(caLine))).Replace(tc.lines) + "\n"
			path := verifytest.WriteFile(t, filepath.Join(t.TempDir(), "allowed_signers"), []byte(text))
			signers, err := sshsig.LoadAllowedSigners(path)
			if err != nil {
				t.Fatal(err)
			}
			r, err := git.PlainOpen(repo)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Verify(context.Background(), r, Options{AllowedSigners: signers, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			g := rep.Generations[0]
			commitOK, tagOK := g.CommitSignature == SigVerified, g.TagSignature == SigVerified
			head := strings.TrimSpace(verifytest.Git(t, repo, "rev-parse", "refs/heads/"+gitops.DefaultBranch))
			cfg := []string{"-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile=" + path}
			out, gerr := verifytest.GitRun(repo, nil, append(cfg, "verify-commit", head)...)
			if (gerr == nil) != commitOK || commitOK != tc.wantGit {
				t.Fatalf("commit: verify-repo %v (%s), git verify-commit %v, want %v\n%s\n%s", commitOK, g.CommitSignature, gerr == nil, tc.wantGit, out, dump(rep))
			}
			out, gerr = verifytest.GitRun(repo, nil, append(cfg, "verify-tag", f.Gens[0].Tag)...)
			if (gerr == nil) != tagOK || tagOK != tc.wantGit {
				t.Fatalf("tag: verify-repo %v (%s), git verify-tag %v, want %v\n%s\n%s", tagOK, g.TagSignature, gerr == nil, tc.wantGit, out, dump(rep))
			}
			if commitOK {
				if fileOK := g.Signature == wtxt.SigVerified; fileOK != tc.wantFile {
					t.Fatalf("WTXT signature %s, want verified=%v\n%s", g.Signature, tc.wantFile, dump(rep))
				}
				if rep.OK != tc.wantFile {
					t.Fatalf("report OK %v\n%s", rep.OK, dump(rep))
				}
			}
		})
	}
}

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sshPub(t *testing.T, k ed25519.PublicKey) ssh.PublicKey {
	t.Helper()
	p, err := ssh.NewPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// resign replaces generation g's commit and tag in repo by copies signed
// through cert (a certificate for priv's public key), moving the branch
// and the tag.
func resign(t *testing.T, repo string, g *verifytest.Gen, priv ed25519.PrivateKey, cert *ssh.Certificate) {
	t.Helper()
	keySigner, err := ssh.NewSignerFromSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewCertSigner(cert, keySigner)
	if err != nil {
		t.Fatal(err)
	}
	r, err := git.PlainOpen(repo)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(enc func(o plumbing.EncodedObject) error) string {
		o := r.Storer.NewEncodedObject()
		if err := enc(o); err != nil {
			t.Fatal(err)
		}
		rd, _ := o.Reader()
		var b bytes.Buffer
		b.ReadFrom(rd)
		sig, err := sshsig.SignWith(signer, sshsig.NamespaceGit, bytes.NewReader(b.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		return string(sig)
	}
	c, err := object.GetCommit(r.Storer, plumbing.NewHash(g.Commit))
	if err != nil {
		t.Fatal(err)
	}
	c.PGPSignature = sign(c.EncodeWithoutSignature)
	o := r.Storer.NewEncodedObject()
	if err := c.Encode(o); err != nil {
		t.Fatal(err)
	}
	ch, err := r.Storer.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Storer.Reference(plumbing.NewTagReferenceName(g.Tag))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := object.GetTag(r.Storer, ref.Hash())
	if err != nil {
		t.Fatal(err)
	}
	tg.Target = ch
	tg.PGPSignature = sign(tg.EncodeWithoutSignature)
	o = r.Storer.NewEncodedObject()
	if err := tg.Encode(o); err != nil {
		t.Fatal(err)
	}
	th, err := r.Storer.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	verifytest.Git(t, repo, "update-ref", "refs/heads/"+gitops.DefaultBranch, ch.String())
	verifytest.Git(t, repo, "update-ref", "refs/tags/"+g.Tag, th.String())
}
