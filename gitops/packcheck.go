package gitops

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/snapd-ml/snapd/internal/gitexec"
)

// EnvCheckPacks names an environment variable read by OpenRepo: when it
// is "1", every pack a Commit of that Repo writes (packw.go) is checked
// with `git index-pack --strict` before it is installed, and a pack git
// refuses fails the Commit (nothing is installed). The check reads the
// whole pack a second time; gitops's tests turn it on so that every pack
// they make passes git's own checks, and it can be turned on in the
// field to rule the pack writer out.
const EnvCheckPacks = "SNAPD_CHECK_PACKS"

// checkPacksFromEnv reports whether getenv turns the pack check on.
func checkPacksFromEnv(getenv func(string) string) bool {
	return getenv(EnvCheckPacks) == "1"
}

// indexPackCheck returns a packWriter check that runs `git index-pack
// --verify --strict` over a pack and the index snapd wrote for it: git
// indexes every object again (applying every delta), checks each object
// as fsck --strict does, and compares its index with snapd's. The pack
// and index are linked (copied across file systems) into a scratch
// object directory that git sees as an alternate of the repository at
// repoDir, so the links of the pack's trees resolve to objects the
// repository already has or the pack holds. The error carries git's
// message.
func indexPackCheck(ctx context.Context, repoDir string) func(pack, idx string, sum plumbing.Hash) error {
	return func(pack, idx string, sum plumbing.Hash) error {
		git, err := exec.LookPath("git")
		if err != nil {
			return fmt.Errorf("git index-pack --strict: %w", err)
		}
		scratch, err := os.MkdirTemp("", "snapd-packcheck-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(scratch)
		dir := filepath.Join(scratch, "pack")
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		name := filepath.Join(dir, "pack-"+sum.String())
		if err := linkOrCopy(pack, name+".pack"); err != nil {
			return err
		}
		if err := linkOrCopy(idx, name+".idx"); err != nil {
			return err
		}
		o := localGit(git, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+scratch)
		var out limitedBuffer
		o.Stdout, o.Stderr = &out, &out
		if err := gitexec.Run(ctx, o, "-C", repoDir, "index-pack", "--verify", "--strict", name+".pack"); err != nil {
			cause, _ := gitexec.Split(err)
			return fmt.Errorf("git index-pack --verify --strict: %w: %s", cause, strings.TrimSpace(out.String()))
		}
		return nil
	}
}

// linkOrCopy makes dst a hard link of src, or a copy when src is on
// another file system.
func linkOrCopy(src, dst string) error {
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
