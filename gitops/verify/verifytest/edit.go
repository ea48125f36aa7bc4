package verifytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
)

// EditHead rewrites the tree of the branch head of the bare repository
// repo with the git CLI and commits the result in its place, with the
// head's parent and message, signed with signKey's private key file (""
// for unsigned); the branch and the generation's annotated tag (tag, also
// signed with signKey) move to the new commit. edits maps repository
// paths to new contents; a nil value removes the path. It returns the new
// commit's hash. A trusted signer committing damaged content is what the
// content checks exist for.
func EditHead(t testing.TB, repo, tag string, edits map[string][]byte, signKey string) string {
	t.Helper()
	return rewriteHead(t, repo, tag, edits, nil, signKey)
}

// RewordHead rewrites the message of the branch head of repo (bare or
// not) to reword(message), keeping its tree and parent, and moves the
// branch and the annotated tag tag (which carries the new message) to
// the new commit, both signed with signKey's private key file as EditHead
// does. A trusted signer committing a wrong trailer is what the trailer
// checks exist for.
func RewordHead(t testing.TB, repo, tag string, reword func(msg string) string, signKey string) string {
	t.Helper()
	return rewriteHead(t, repo, tag, nil, reword, signKey)
}

// rewriteHead is EditHead with the message changed by reword (nil: kept).
func rewriteHead(t testing.TB, repo, tag string, edits map[string][]byte, reword func(string) string, signKey string) string {
	t.Helper()
	head := strings.TrimSpace(Git(t, repo, "rev-parse", "refs/heads/"+gitops.DefaultBranch))
	env := []string{"GIT_INDEX_FILE=" + filepath.Join(t.TempDir(), "index")}
	gitEnv := func(args ...string) string {
		t.Helper()
		out, err := GitRun(repo, env, args...)
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	gitEnv("read-tree", head)
	for p, data := range edits {
		if data == nil {
			// Mode 0 removes the entry (works in a bare repository).
			cmd := exec.Command("git", "update-index", "--index-info")
			cmd.Dir, cmd.Env = repo, append(os.Environ(), env...)
			cmd.Stdin = strings.NewReader("0 " + strings.Repeat("0", 40) + "\t" + p + "\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git update-index --index-info (remove %s): %v\n%s", p, err, out)
			}
			continue
		}
		f := WriteFile(t, filepath.Join(t.TempDir(), "blob"), data)
		blob := strings.TrimSpace(Git(t, repo, "hash-object", "-w", f))
		gitEnv("update-index", "--add", "--cacheinfo", "100644,"+blob+","+p)
	}
	tree := strings.TrimSpace(gitEnv("write-tree"))
	raw := Git(t, repo, "cat-file", "commit", head)
	_, msg, _ := strings.Cut(raw, "\n\n")
	if reword != nil {
		if msg = reword(msg); msg == "" {
			t.Fatal("RewordHead: empty message")
		}
	}
	msgFile := WriteFile(t, filepath.Join(t.TempDir(), "msg"), []byte(msg))
	args := append(signArgs(signKey), "commit-tree", tree, "-F", msgFile)
	if parent, err := GitRun(repo, nil, "rev-parse", "--verify", "-q", head+"^"); err == nil {
		args = append(args, "-p", strings.TrimSpace(parent))
	}
	if signKey != "" {
		args = append(args, "-S")
	}
	commit := strings.TrimSpace(Git(t, repo, args...))
	Git(t, repo, "update-ref", "refs/heads/"+gitops.DefaultBranch, commit)
	tagArgs := append(signArgs(signKey), "tag", "-f", "-a", "--cleanup=verbatim", "-F", msgFile)
	if signKey != "" {
		tagArgs = append(tagArgs, "-s")
	}
	Git(t, repo, append(tagArgs, tag, commit)...)
	return commit
}

// ReadBlob returns the content of rev:path in repo.
func ReadBlob(t testing.TB, repo, rev, path string) []byte {
	t.Helper()
	out, err := GitRun(repo, nil, "cat-file", "blob", rev+":"+path)
	if err != nil {
		t.Fatalf("git cat-file blob %s:%s: %v", rev, path, err)
	}
	return []byte(out)
}
