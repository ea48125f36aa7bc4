package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/atomicfile"
)

type checkoutOptions struct {
	repo string
	ledgerFlags
	to       string
	lossy    bool
	gen, out string
	oci      ociReadFlags
}

func newCheckoutCommand(e *env) *cobra.Command {
	var o checkoutOptions
	cmd := &cobra.Command{
		Use:   "checkout GEN OUT",
		Short: "Restore one generation from the snapshot repository into any format",
		Long: `Restore generation GEN of the snapshot branch into OUT, in the format of
OUT's extension (or --to): WTXT byte for byte as committed (split
generations are assembled, every part checked against the MANIFEST), any
other format through a conversion. OUT ending in '/' (or an existing
directory, or --to dcp) is written as a checkpoint directory, as convert
writes one (safetensors shards + index by default; --to picks the shard
format). What the target format cannot hold fails, naming it; --lossy
drops it instead and prints each dropped item on stderr ("dropped: ...").
GEN is a number (tag gen-NNNNNN),
"latest" (the branch head; HEAD in a clone of one generation, snapd
clone --gen) or any Git revision. The repository is --repo, e.g. a
clone made with snapd clone (default: the daemon's STATE_DIR/repo when
--state-dir is given, which keeps only the newest pushed generations;
else the current directory).

A skeleton-layout generation (current.wtxt.skel[.parts]; tensor bytes in an
OCI registry, docs/FORMAT.md §6) is rebuilt from the skeleton and the
registry's segment blobs, read only, streaming, with every chunk's sha256
and crc32c and every blob's digest checked against the skeleton; on any
failure nothing is written to OUT. A generation whose tensor bytes
retention removed (snapd gc --remote, then the registry's garbage
collection: a blob and its gen-NNNNNN manifest are gone) fails with
"content collected: generation N's tensor bytes were removed from
REGISTRY by retention ...", after its skeleton was checked alone (every
line and ch hash, the header's Merkle value), exit status 1; a blob
missing under a manifest that is still there is damage and fails as
such. The registry is --oci-repository, by
default generation.txt's oci_repository (printed). A defaulted registry
gets no credentials but the Docker config's entry for its own host (never
--oci-username, --oci-password-file or SNAPD_OCI_*), and plain HTTP only
on loopback: the commit names the host, the skeleton's hashes decide what
is accepted.`,
		Example: `  snapd clone https://github.com/org/weights.git w && cd w
  snapd checkout latest model.safetensors
  snapd checkout 42 gen42.wtxt --repo /var/lib/snapd-ml/repo
  snapd checkout 10 out/                                 # a checkpoint directory
  snapd checkout latest model.safetensors --oci-repository ghcr.io/org/model`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.gen, o.out = args[0], args[1]
			o.repo = readRepoDir(cmd, e, o.repo)
			return runCheckout(cmd.Context(), e, &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", ".", repoFlagUsage)
	o.ledgerFlags.register(f)
	f.StringVar(&o.to, "to", "", usageTo)
	f.BoolVar(&o.lossy, "lossy", false, usageLossy)
	o.oci.register(f)
	return cmd
}

// revision turns GEN into a Git revision.
func (o *checkoutOptions) revision(repo *gitops.Repo) (string, error) {
	if o.gen == "latest" || o.gen == "" {
		return repo.LatestRevision(), nil
	}
	if n, err := strconv.ParseUint(o.gen, 10, 64); err == nil {
		rev, err := repo.ResolveGen(n)
		if errors.Is(err, gitops.ErrPruned) {
			return "", withHint(err, "the daemon's repository keeps only the newest pushed generations (retention.repo): snapd clone REMOTE DIR --gen N, then --repo DIR")
		}
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
	// A directory target (OUT ending in '/', an existing directory, or
	// --to dcp) is written as convert writes one (formats/sharddir, dcp).
	toDir := o.to == "dcp" || strings.HasSuffix(o.out, "/") || isDir(o.out)
	switch {
	case toDir:
	case o.to != "":
		target, err = reg.ByName(o.to)
	default:
		target, err = reg.ByExtension(o.out)
	}
	if err != nil {
		return usageError{fmt.Errorf("%w (use --to, or end OUT with / for a checkpoint directory)", err)}
	}
	repo, err := openReadRepo(o.repo, gitops.Config{Branch: o.branch, Path: o.path, TagPrefix: o.tagPrefix})
	if err != nil {
		return err
	}
	rev, err := o.revision(repo)
	if err != nil {
		return err
	}
	write := func(w io.Writer) error { return repo.WriteWTXT(rev, w) }
	if stored, err := repo.Layout(rev); err != nil {
		return err
	} else if stored == layout.Skeleton {
		if write, err = o.skeletonWriter(ctx, e, repo, rev); err != nil {
			return err
		}
	}
	if !toDir && target.Name() == "wtxt" {
		return writeAtomic(o.out, func(f *os.File) error { return write(f) })
	}
	// Other formats: assemble the WTXT next to OUT, then convert.
	out := strings.TrimSuffix(o.out, "/")
	tmp, err := atomicfile.Create(filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".wtxt"), 0o600)
	if err != nil {
		return ioError{err}
	}
	defer tmp.Abort()
	if err := write(tmp.File); err != nil {
		return err
	}
	src, err := openSnapshot(ctx, reg, tmp.File.Name(), "wtxt")
	if err != nil {
		return err
	}
	defer src.Close()
	lost := func(l formats.Loss) { fmt.Fprintf(e.stderr, "snapd: dropped: %s\n", l) }
	if toDir {
		err = convertToDir(ctx, reg, src.Snapshot, &convertOptions{out: o.out, to: o.to, lossy: o.lossy}, lost)
	} else {
		err = writeAtomic(o.out, func(f *os.File) error {
			return target.Encode(ctx, f, src.Snapshot, formats.EncodeOptions{Lossy: o.lossy, Lost: lost})
		})
	}
	if errors.Is(err, formats.ErrLossy) && !o.lossy {
		return withHint(err, "use --lossy to drop it (each dropped item is reported)")
	}
	return err
}

// skeletonWriter returns the writer of a skeleton-layout generation's
// WTXT: rev's skeleton streamed through the assembler with the registry's
// blobs (every chunk hash and blob digest checked). The registry is
// --oci-repository or, by default, generation.txt's oci_repository,
// opened without the flag/environment credentials and without
// --oci-insecure (the untrusted commit chose the host).
func (o *checkoutOptions) skeletonWriter(ctx context.Context, e *env, repo *gitops.Repo, rev string) (func(io.Writer) error, error) {
	var src *oci.Repository
	if o.oci.repository != "" {
		r, err := o.oci.open(e)
		if err != nil {
			return nil, err
		}
		src = r
	} else {
		sum, err := repo.Summary(rev)
		if err != nil {
			return nil, err
		}
		ref := sum["oci_repository"]
		if ref == "" {
			return nil, usageError{fmt.Errorf("%s: the generation is in the skeleton layout (tensor bytes in an OCI registry) and its %s names no oci_repository: give --oci-repository", o.gen, gitops.FileSummary)}
		}
		if o.oci.username != "" || o.oci.passwordFile != "" || o.oci.insecure {
			return nil, usageError{errors.New("--oci-username, --oci-password-file and --oci-insecure need an explicit --oci-repository (the default comes from the commit, which must not choose where credentials go)")}
		}
		to, err := o.oci.timeouts()
		if err != nil {
			return nil, err
		}
		r, err := oci.Open(ref, oci.Options{DockerConfig: o.oci.dockerConfig, Timeouts: to, Logger: e.logger})
		if err != nil {
			return nil, usageError{fmt.Errorf("%s's oci_repository: %w (give --oci-repository)", gitops.FileSummary, err)}
		}
		msg := "snapd: registry %s (from %s; read only)\n"
		if e.getenv("SNAPD_OCI_USERNAME") != "" || e.getenv("SNAPD_OCI_PASSWORD") != "" {
			msg = "snapd: registry %s (from %s; read only; SNAPD_OCI_* credentials are used only with an explicit --oci-repository)\n"
		}
		fmt.Fprintf(e.stderr, msg, ref, gitops.FileSummary)
		src = r
	}
	name := path.Join(o.path, layout.FileSkeleton)
	return func(w io.Writer) error {
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			err := repo.WriteSkeleton(rev, pw)
			pw.CloseWithError(err)
			done <- err
		}()
		_, err := wtxt.AssembleNamed(ctx, pr, name, src, w)
		pr.CloseWithError(errors.New("assembly ended"))
		if serr := <-done; serr != nil && err != nil && !errors.Is(err, serr) {
			// The skeleton could not be read from Git: that is the cause.
			return ioError{serr}
		}
		if errors.Is(err, wtxt.ErrBlobNotFound) {
			// Retention may have collected the generation's content.
			if sum, serr := repo.Summary(rev); serr == nil {
				err = explainCollected(ctx, src, sum["gen"], sum["oci_tag"], func(w io.Writer) error { return repo.WriteSkeleton(rev, w) }, name, err)
			}
		}
		return registryErr(err)
	}, nil
}
