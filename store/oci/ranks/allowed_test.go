package ranks

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/gitops/sshsig"
)

// TestVerifyLedgerAllowedSigners: ranks verify-repo applies the
// allowed_signers options. The commit and tag signatures are checked by
// git (its verdict is asserted to be git verify-commit's); the index
// (committer key) and rank part (node key) signatures, namespace "file",
// only by keys whose lines allow "file" at the commit's time
// (2026-11-24T08:00Z): valid-before past or namespaces="git" alone
// refuse them; a window containing the commit time passes although it
// has ended by now.
func TestVerifyLedgerAllowedSigners(t *testing.T) {
	f := newFixture(t, 1)
	c := f.committerFor(OnTimeoutWait)
	f.publish(1, 0)
	if st, err := c.Step(context.Background()); err != nil || st.LastCommitted != 1 {
		t.Fatalf("status %+v %v", st, err)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	if out, err := exec.Command("git", "clone", "-q", "--branch", "snapshots", f.remote, clone).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	committerPub, _ := os.ReadFile(f.committer.SignPub)
	committer := strings.TrimSpace(string(committerPub))
	np, _ := ssh.NewPublicKey(f.trusted[1])
	node := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(np)))
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
			gitOK := exec.Command("git", "-C", clone, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+path, "verify-commit", "HEAD").Run() == nil
			if gitOK != tc.wantGit {
				t.Fatalf("git verify-commit %v, want %v", gitOK, tc.wantGit)
			}
			_, err = VerifyLedger(context.Background(), VerifyLedgerOptions{Dir: clone, Repo: f.repo, AllowedSigners: path, Signers: signers, Chain: testChain})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("VerifyLedger: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("VerifyLedger: %v, want an error with %q", err, tc.wantErr)
			case !gitOK && (err == nil || !strings.Contains(err.Error(), "commit signature")):
				t.Fatalf("git refuses the commit, VerifyLedger: %v", err)
			}
		})
	}
}
