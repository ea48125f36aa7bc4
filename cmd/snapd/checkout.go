package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/atomicfile"
)

type checkoutOptions struct {
	repo, branch, path, tagPrefix string
	to                            string
	lossy                         bool
	gen, out                      string
}

func newCheckoutCommand(e *env) *cobra.Command {
	var o checkoutOptions
	cmd := &cobra.Command{
		Use:   "checkout GEN OUT",
		Short: "Restore one generation from the snapshot repository into any format",
		Long: `Restore generation GEN of the snapshot branch into OUT, in the format of
OUT's extension (or --to): WTXT byte for byte as committed (split
generations are assembled, every part checked against the MANIFEST), any
other format through a conversion. GEN is a number (tag gen-NNNNNN),
"latest" (the branch head) or any Git revision. The repository is --repo
(default: the current directory), e.g. a clone made with snapd clone.`,
		Example: `  snapd clone https://github.com/org/weights.git w && cd w
  snapd checkout latest model.safetensors
  snapd checkout 42 gen42.wtxt --repo /var/lib/snapd-ml/repo`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.gen, o.out = args[0], args[1]
			return runCheckout(cmd.Context(), e, &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", ".", "repository (bare or with a work tree)")
	f.StringVar(&o.branch, "branch", gitops.DefaultBranch, "snapshot branch")
	f.StringVar(&o.path, "path", gitops.DefaultPath, "directory holding the generation files")
	f.StringVar(&o.tagPrefix, "tag-prefix", gitops.DefaultTagPrefix, "generation tag prefix")
	f.StringVar(&o.to, "to", "", "output format (default: from OUT's extension)")
	f.BoolVar(&o.lossy, "lossy", false, "allow dropping what the target format cannot hold")
	return cmd
}

// revision turns GEN into a Git revision.
func (o *checkoutOptions) revision(repo *gitops.Repo) (string, error) {
	if o.gen == "latest" || o.gen == "" {
		return "refs/heads/" + o.branch, nil
	}
	if n, err := strconv.ParseUint(o.gen, 10, 64); err == nil {
		rev, err := repo.ResolveGen(n)
		if err != nil {
			return "", withHint(err, "a shallow clone holds only the generations it fetched: snapd clone --gen N, or git fetch --deepen")
		}
		return rev, nil
	}
	return o.gen, nil
}

func runCheckout(ctx context.Context, e *env, o *checkoutOptions) error {
	reg := newRegistry()
	var target formats.Codec
	var err error
	if o.to != "" {
		target, err = reg.ByName(o.to)
	} else {
		target, err = reg.ByExtension(o.out)
	}
	if err != nil {
		return usageError{fmt.Errorf("%w (use --to)", err)}
	}
	repo, err := gitops.OpenExisting(o.repo, gitops.Config{Branch: o.branch, Path: o.path, TagPrefix: o.tagPrefix})
	if err != nil {
		if errors.Is(err, gitops.ErrConfig) {
			return usageError{err}
		}
		return ioError{err}
	}
	rev, err := o.revision(repo)
	if err != nil {
		return err
	}
	if target.Name() == "wtxt" {
		return writeAtomic(o.out, func(f *os.File) error { return repo.WriteWTXT(rev, f) })
	}
	// Other formats: assemble the WTXT next to OUT, then convert.
	tmp, err := atomicfile.Create(filepath.Join(filepath.Dir(o.out), "."+filepath.Base(o.out)+".wtxt"), 0o600)
	if err != nil {
		return ioError{err}
	}
	defer tmp.Abort()
	if err := repo.WriteWTXT(rev, tmp.File); err != nil {
		return err
	}
	src, err := openSnapshot(ctx, reg, tmp.File.Name(), "wtxt")
	if err != nil {
		return err
	}
	defer src.Close()
	return writeAtomic(o.out, func(f *os.File) error {
		return target.Encode(ctx, f, src.Snapshot, formats.EncodeOptions{Lossy: o.lossy})
	})
}
