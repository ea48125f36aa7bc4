package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/progress"
	"github.com/snapd-ml/snapd/internal/safeopen"
	"github.com/snapd-ml/snapd/keys"
)

// timeouts are the registry timeouts of f (zero fields: oci's defaults).
func (f *ociReadFlags) timeouts() (oci.Timeouts, error) {
	if f.timeout < 0 || f.stall < 0 {
		return oci.Timeouts{}, usageError{errors.New("--oci-timeout and --oci-stall-timeout must be > 0")}
	}
	return oci.Timeouts{Connect: f.timeout, TLSHandshake: f.timeout, ResponseHeader: f.timeout, Stall: f.stall}, nil
}

// open resolves credentials (flags, then SNAPD_OCI_USERNAME and
// SNAPD_OCI_PASSWORD, then the Docker config) and opens the repository
// for reading.
func (f *ociReadFlags) open(e *env) (*oci.Repository, error) {
	return f.openWith(e, func(*oci.Options) {})
}

// open is ociReadFlags.open with the upload options.
func (f *ociWriteFlags) open(e *env) (*oci.Repository, error) {
	return f.openWith(e, func(o *oci.Options) { o.Concurrency, o.MountFrom = f.jobs, f.mountFrom })
}

func (f *ociReadFlags) openWith(e *env, set func(*oci.Options)) (*oci.Repository, error) {
	if f.repository == "" {
		return nil, usageError{errors.New("--oci-repository HOST[:PORT]/NAME is required")}
	}
	to, err := f.timeouts()
	if err != nil {
		return nil, err
	}
	opts := oci.Options{Insecure: f.insecure, DockerConfig: f.dockerConfig, Timeouts: to, Logger: e.logger}
	set(&opts)
	opts.Username = f.username
	if opts.Username == "" {
		opts.Username = e.getenv("SNAPD_OCI_USERNAME")
	}
	if f.passwordFile != "" {
		b, err := keys.ReadSecretFile(f.passwordFile)
		if err != nil {
			return nil, ioError{err}
		}
		opts.Password = strings.TrimRight(string(b), "\r\n") // checked now; re-read at every authentication
		opts.PasswordFile = f.passwordFile
	} else {
		opts.Password = e.getenv("SNAPD_OCI_PASSWORD")
	}
	if opts.Username == "" && opts.Password != "" {
		return nil, usageError{errors.New("a registry password is given but no user (--oci-username or SNAPD_OCI_USERNAME)")}
	}
	r, err := oci.Open(f.repository, opts)
	if err != nil {
		return nil, usageError{err}
	}
	return r, nil
}

func newOCICommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "oci",
		Short: "Tensor bytes in an OCI registry, the skeleton in Git (skeleton layout)",
	}
	cmd.AddCommand(newOCIPushCommand(e))
	return cmd
}

type ociPushOptions struct {
	oci      ociWriteFlags
	skeleton string
	prevSkel string
	// prevSkeleton is --prev-skeleton, read (for the segment cache).
	prevSkeleton *wtxt.PrevSkeleton
	segCache     string
	segSize      int64
	json         bool
	from         string
	wsum         string    // for a streamed WTXT input
	w            wtxtFlags // for a checkpoint input
}

func newOCIPushCommand(e *env) *cobra.Command {
	var o ociPushOptions
	cmd := &cobra.Command{
		Use:   "push IN --oci-repository HOST[:PORT]/NAME",
		Short: "Push a WTXT or checkpoint as segment blobs and a gen-NNNNNN manifest; write its skeleton",
		Long: `push splits the WTXT IN into its skeleton (every line but the base64 lines,
plus one seg line per segment; see docs/FORMAT.md) and chunk-aligned
segment blobs, asks the registry which blobs it has (HEAD), uploads only
the missing ones in parallel, then the config blob and the manifest
tagged gen-NNNNNN (when that tag names another manifest of the same
number, a resumed run's re-use: the first free gen-NNNNNN-rK, printed).
The skeleton is written atomically (default IN.skel)
only after the manifest is in the registry; commit it to Git. Every
chunk's sha256 and crc32c are checked while splitting. "snapd assemble
--oci-repository R SKELETON OUT" rebuilds the WTXT byte for byte.

A streamed WTXT (root_pending, "snapd convert --stream") is pushed with
its WSUM (--wsum, default IN with .wtxt replaced by .wsum): the WTXT is
first verified against it (every hash, sha256_all, the Merkle formula;
one more read of IN), and the manifest's snapd.sha256_all and
snapd.merkle_this are the WSUM's; without its WSUM the push is refused.
The skeleton keeps the WTXT's header as written.

IN may also be a checkpoint in any format convert reads (or a checkpoint
directory): it is then converted straight to the skeleton and segments,
with the WTXT options convert takes (--gen, --ts, --sign-key, --hmac-key,
--prev ...; --prev may name the previous skeleton), and no WTXT is
written: the skeleton, blobs and manifest are the same bytes as
"snapd convert IN X.wtxt" with those options followed by "snapd oci push
X.wtxt", at about half the work (no base64, no WTXT written and read
back).

--prev-skeleton (the previous generation's skeleton from this repository,
e.g. the one committed to Git) makes the push cost follow the change: a
segment whose ch lines (every chunk's off, len, sha256, crc32c) equal a
segment of the previous skeleton is neither read nor decoded (a
checkpoint input's is read for its chunk sums, but not hashed whole or
sent) when the registry confirms it: the previous generation's manifest
(one GET of the tag gen-NNNNNN the skeleton's header names) and its
config must list that segment at the same place with the same size and
digest; its digest is then reused. The skeleton is evidence, not truth:
a segment the registry does not confirm (an edited or foreign skeleton,
or a previous manifest that is gone) is read, checked and uploaded as
without it (counted as "unproven"), so the skeleton and manifest are
always the same bytes. Should a blob have been deleted from under the
previous manifest, the registry refuses the new one
(MANIFEST_BLOB_UNKNOWN): push again without --prev-skeleton, which HEADs
every blob and uploads what is gone.

--segment-cache FILE (checkpoint input) goes further: every segment is
read, but one whose bytes the previous push saw at the same place is
recognised by a keyed BLAKE3 (keys derived from --hmac-key, else from
--sign-key) and takes its chunk sums from --prev-skeleton instead of a
SHA-256 of every chunk. FILE holds one tag per segment, written after
each push (atomically) for the next; without the key no valid tag can be
made, so an edited or foreign FILE only costs hashing (output identical).`,
		Example: `  snapd oci push gen3.wtxt --oci-repository ghcr.io/acme/model --prev-skeleton gen2.wtxt.skel
  snapd oci push model.safetensors --oci-repository ghcr.io/acme/model --skeleton gen3.wtxt.skel \
      --gen 3 --prev gen2.wtxt.skel --prev-skeleton gen2.wtxt.skel --sign-key keys/sign_ed25519 --hmac-key keys/hmac.key`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOCIPush(cmd.Context(), e, args[0], &o, wtxtFlagsSet(cmd))
		},
	}
	o.oci.register(cmd.Flags())
	// The WTXT writer flags of convert, but --stream and --encrypt-to: the
	// skeleton layout holds plain WTXT with its root line.
	defs := &cobra.Command{}
	o.w.register(defs)
	defs.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "stream" && f.Name != "encrypt-to" {
			cmd.Flags().AddFlag(f)
		}
	})
	cmd.Flags().StringVar(&o.wsum, "wsum", "", usageWSUMIn)
	cmd.Flags().StringVar(&o.from, "from", "", usageFrom)
	cmd.Flags().StringVar(&o.skeleton, "skeleton", "", "where to write the skeleton (default IN.skel for a WTXT, IN.wtxt.skel for a checkpoint)")
	cmd.Flags().StringVar(&o.prevSkel, "prev-skeleton", "", "the previous generation's skeleton (this repository's): segments whose chunks it has and that its gen-NNNNNN manifest in the registry confirms (same place, size and digest) are not decoded, hashed whole or sent again")
	cmd.Flags().StringVar(&o.segCache, "segment-cache", "", "checkpoint input: a file this push reads (when there, from the push of the --prev-skeleton generation) and rewrites: segments it proves unchanged are hashed with keyed BLAKE3 instead of SHA-256 per chunk (keys derived from --hmac-key, else --sign-key)")
	cmd.Flags().Int64Var(&o.segSize, "segment-size", 0, "target segment blob size in bytes (0: automatic, 4 MiB doubled until the generation has fewer than 8192 segments, so the manifest stays small; the same for every generation of one model)")
	cmd.Flags().BoolVar(&o.json, "json", false, usageJSON)
	return cmd
}

func runOCIPush(ctx context.Context, e *env, in string, o *ociPushOptions, wtxtSet []string) error {
	if o.segSize < 0 {
		return usageError{errors.New("--segment-size must be >= 0 (0: automatic)")}
	}
	isWTXT, err := hasWTXTMagic(in)
	if err != nil {
		return err
	}
	if o.from != "" {
		wtxtSet = append(wtxtSet, "from")
	}
	if o.segCache != "" {
		wtxtSet = append(wtxtSet, "segment-cache")
	}
	if isWTXT && len(wtxtSet) > 0 {
		return usageError{fmt.Errorf("%s is a WTXT: --%s applies to a checkpoint input only", in, wtxtSet[0])}
	}
	if !isWTXT && o.wsum != "" {
		return usageError{fmt.Errorf("%s is not a WTXT: --wsum applies to a streamed WTXT input only", in)}
	}
	var wsum *wtxt.WSUM
	if isWTXT {
		if wsum, err = streamedWSUM(ctx, in, o.wsum); err != nil {
			return err
		}
	}
	repo, err := o.oci.open(e)
	if err != nil {
		return err
	}
	var prev oci.Previous
	if o.prevSkel != "" {
		if prev, o.prevSkeleton, err = readPrevSkeleton(ctx, o.prevSkel); err != nil {
			return err
		}
	}
	if !isWTXT {
		return pushCheckpoint(ctx, e, repo, in, o, prev)
	}
	f, err := os.OpenFile(in, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ioError{err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ioError{err}
	} else if !fi.Mode().IsRegular() {
		return ioError{fmt.Errorf("%s: not a regular file", in)}
	} else if o.segSize == 0 {
		o.segSize = oci.AutoSegmentSize(fi.Size())
	}
	skel := o.skeleton
	if skel == "" {
		skel = in + ".skel"
	}
	out, err := atomicfile.Create(skel, 0o644)
	if err != nil {
		return ioError{err}
	}
	defer out.Abort()
	res, err := repo.PushStreamedWTXTAt(ctx, f, fi.Size(), filepath.Base(in), out, o.segSize, prev, wsum)
	if err != nil {
		return registryErr(err)
	}
	if err := out.Commit(); err != nil {
		return ioError{err}
	}
	return reportOCIPush(e, repo, res, skel, o)
}

// reportOCIPush prints what a push did (--json: one object, docs/JSON.md).
func reportOCIPush(e *env, repo *oci.Repository, res *oci.PushResult, skel string, o *ociPushOptions) error {
	if o.json {
		return writeJSON(e.stdout, map[string]any{
			"repository": repo.Name(), "tag": res.Tag, "manifest": res.Manifest.Digest.String(), "skeleton": skel, "segment_size": o.segSize,
			"segments": res.Segments, "uploaded": res.Uploaded, "uploaded_bytes": res.UploadedBytes,
			"mounted": res.Mounted, "mounted_bytes": res.MountedBytes,
			"skipped": res.Skipped, "skipped_bytes": res.SkippedBytes, "reused": res.Reused, "unproven": res.Unproven, "cache_hits": res.CacheHits,
		})
	}
	fmt.Fprintf(e.stdout, "%s:%s %s\nsegments %d: uploaded %d (%d bytes), mounted %d (%d bytes), already present %d (%d bytes; %d known from --prev-skeleton: not hashed or sent again)\nskeleton %s\n",
		repo.Name(), res.Tag, res.Manifest.Digest, res.Segments, res.Uploaded, res.UploadedBytes, res.Mounted, res.MountedBytes, res.Skipped, res.SkippedBytes, res.Reused, skel)
	if res.Unproven > 0 {
		fmt.Fprintf(e.stdout, "%d segments of --prev-skeleton %s were not confirmed by the registry's previous manifest (edited, foreign, or that manifest is gone): read and checked instead\n", res.Unproven, o.prevSkel)
	}
	if o.segCache != "" {
		fmt.Fprintf(e.stdout, "segment cache %s: %d of %d segments unchanged (their chunks not hashed again)\n", o.segCache, res.CacheHits, res.Segments)
	}
	return nil
}

// pushCheckpoint converts the checkpoint in straight to a skeleton and
// segments and pushes them (oci.Repository.PushSnapshotFile: no WTXT
// written; it keeps --segment-cache).
func pushCheckpoint(ctx context.Context, e *env, repo *oci.Repository, in string, o *ociPushOptions, prev oci.Previous) error {
	meta, opts, err := o.w.options(e)
	if err != nil {
		return err
	}
	var src *openedSnapshot
	if isDir(in) {
		src, err = openDir(ctx, newRegistry(), in, o.from, e.logger)
	} else {
		src, err = openSnapshot(ctx, newRegistry(), in, o.from)
	}
	if err != nil {
		return err
	}
	defer src.Close()
	s := src.Snapshot
	s.Meta = meta
	skel := o.skeleton
	if skel == "" {
		skel = strings.TrimSuffix(in, "/") + ".wtxt.skel"
	}
	res, _, segSize, err := repo.PushSnapshotFile(ctx, s, opts, oci.FilePush{Skeleton: skel, SegmentSize: o.segSize, Previous: prev,
		SegmentCache: o.segCache, PrevSkeleton: o.prevSkeleton, Logger: e.logger})
	var fe *oci.FileError
	switch {
	case errors.Is(err, oci.ErrNoCacheKey):
		return usageError{errors.New("--segment-cache needs --hmac-key or --sign-key (its keys are derived from one)")}
	case errors.As(err, &fe):
		return ioError{fe.Err}
	case err != nil:
		return registryErr(err)
	}
	o.segSize = segSize
	return reportOCIPush(e, repo, res, skel, o)
}

// streamedWSUM returns, for a streamed WTXT in (root_pending), its WSUM
// (wsumPath, else in's sibling .wsum) after verifying the WTXT against
// it; nil for a WTXT with a root line (then wsumPath must be "").
func streamedWSUM(ctx context.Context, in, wsumPath string) (*wtxt.WSUM, error) {
	f, err := os.OpenFile(in, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, ioError{err}
	}
	defer f.Close()
	h, err := wtxt.ReadHeader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", in, err)
	}
	if !h.Pending {
		if wsumPath != "" {
			return nil, usageError{fmt.Errorf("--wsum: %s is not a streamed WTXT (it has a root line)", in)}
		}
		return nil, nil
	}
	if wsumPath == "" {
		cand := strings.TrimSuffix(in, ".wtxt") + ".wsum"
		if fi, err := os.Stat(cand); err != nil || !fi.Mode().IsRegular() {
			return nil, usageError{fmt.Errorf("%s is a streamed WTXT (root_pending): its sha256_all, merkle_this and signature are in its WSUM, and there is none at %s: give it with --wsum", in, cand)}
		}
		wsumPath = cand
	}
	b, err := readLimited(wsumPath, 4096)
	if err != nil {
		return nil, ioError{fmt.Errorf("--wsum: %w", err)}
	}
	w, err := wtxt.ParseWSUM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", wsumPath, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, ioError{err}
	}
	if _, err := wtxt.Verify(ctx, f, wtxt.VerifyOptions{File: filepath.Base(in), WSUM: b}); err != nil {
		return nil, fmt.Errorf("%s does not verify with its WSUM %s: %w", in, wsumPath, err)
	}
	return w, nil
}

// hasWTXTMagic reports whether the regular file path is a WTXT by the
// formats registry's sniffing (false for a directory).
func hasWTXTMagic(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, ioError{err}
	}
	if fi.IsDir() {
		return false, nil
	}
	if !fi.Mode().IsRegular() {
		return false, ioError{fmt.Errorf("%s: not a regular file", path)}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, ioError{err}
	}
	defer f.Close()
	b := make([]byte, formats.SniffLen)
	n, _ := io.ReadFull(f, b)
	c, err := newRegistry().Sniff(b[:n])
	return err == nil && c.Name() == wtxt.New().Name(), nil
}

// wtxtFlagsSet lists the WTXT writer flags (those wtxtFlags.register
// defines) given on cmd's command line.
func wtxtFlagsSet(cmd *cobra.Command) []string {
	defs := &cobra.Command{}
	new(wtxtFlags).register(defs)
	var set []string
	defs.Flags().VisitAll(func(f *pflag.Flag) {
		if cmd.Flags().Changed(f.Name) {
			set = append(set, f.Name)
		}
	})
	return set
}

// maxPrevSkeleton bounds the previous skeleton read into memory (a 70B
// model's is about 350 MB at 64 KiB chunks).
const maxPrevSkeleton = 1 << 30

// readPrevSkeleton reads --prev-skeleton (once: its segments by key, its
// generation's manifest by tag, and what a segment cache needs).
func readPrevSkeleton(ctx context.Context, path string) (oci.Previous, *wtxt.PrevSkeleton, error) {
	b, err := safeopen.ReadFile(path, maxPrevSkeleton, 0)
	if errors.Is(err, safeopen.ErrNotRegular) || errors.Is(err, safeopen.ErrTooLarge) {
		return oci.Previous{}, nil, usageError{fmt.Errorf("--prev-skeleton %s: not a regular file of at most %d bytes", path, maxPrevSkeleton)}
	} else if err != nil {
		return oci.Previous{}, nil, ioError{err}
	}
	p, err := wtxt.ParsePrevSkeleton(ctx, b, filepath.Base(path))
	if err != nil {
		return oci.Previous{}, nil, fmt.Errorf("--prev-skeleton: %w", err)
	}
	// The previous generation's manifest (its tag, from the header just
	// checked) lists the blobs the registry holds for it: one GET instead
	// of a HEAD per segment.
	return oci.Previous{Segments: p.Keys(), Manifest: oci.Tag(p.Header.Root.Gen)}, p, nil
}

// runAssembleOCI rebuilds a WTXT from its skeleton and the registry.
func runAssembleOCI(ctx context.Context, e *env, o *ociReadFlags, skel, out string) error {
	le, m := e.meterWithLog(filepath.Base(out), skeletonSize(ctx, skel))
	repo, err := o.open(le)
	if err != nil {
		return endMeter(m, err)
	}
	_, err = oci.AssembleFileCounting(ctx, skel, repo, out, m.Add)
	if errors.Is(err, wtxt.ErrBlobNotFound) {
		// Retention may have collected the generation's content.
		if h, herr := skeletonHeader(skel); herr == nil {
			err = explainCollected(ctx, repo, h.Gen, "", func(w io.Writer) error { return copyFile(skel, w) }, filepath.Base(skel), err)
		}
	}
	return endMeter(m, registryErr(err))
}

// skeletonHeader reads the WTXT header of the skeleton file skel.
func skeletonHeader(skel string) (*wtxt.Header, error) {
	f, err := os.OpenFile(skel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if l, err := br.ReadString('\n'); err != nil || l != wtxt.SkeletonMagic+"\n" {
		return nil, fmt.Errorf("%s: not a skeleton", skel)
	}
	return wtxt.ReadHeader(br)
}

// copyFile copies the file at p to w.
func copyFile(p string, w io.Writer) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// skeletonSize estimates the WTXT a skeleton assembles to, for the
// progress line: the WTXT size of its segments' raw bytes (0 when the
// skeleton cannot be read: AssembleFileCounting reports why).
func skeletonSize(ctx context.Context, skel string) int64 {
	if fi, err := os.Stat(skel); err != nil || !fi.Mode().IsRegular() {
		return 0 // not opened: a FIFO would block
	}
	f, err := os.Open(skel)
	if err != nil {
		return 0
	}
	defer f.Close()
	segs, err := wtxt.SkeletonSegments(ctx, f, filepath.Base(skel))
	if err != nil {
		return 0
	}
	var raw int64
	for _, s := range segs {
		if s.Size < 0 || raw+s.Size < raw {
			return 0
		}
		raw += s.Size
	}
	return progress.WTXTEstimate(raw)
}

// registryErr classes a registry that cannot be reached as an I/O error
// (exit 2); bad content stays exit 1.
func registryErr(err error) error {
	if errors.Is(err, oci.ErrStalled) {
		return withHint(ioError{err}, "the registry stopped answering (it accepted the connection but made no progress within --oci-timeout / --oci-stall-timeout); check that it is up and not overloaded, then re-run (blobs already pushed are skipped)")
	}
	var ue *url.Error
	var ne net.Error
	if err != nil && (errors.As(err, &ue) || errors.As(err, &ne)) {
		return withHint(ioError{err}, "is the registry up and reachable? (the command can be re-run: blobs already pushed are skipped)")
	}
	if errors.Is(err, oci.ErrManifestBlobUnknown) {
		return withHint(err, "a blob was deleted from under the previous generation's manifest: push again without --prev-skeleton, which uploads what is missing")
	}
	return err
}

// runGCRemote deletes the manifests (and so the tags) of every generation
// in the registry but the newest --keep; the registry's garbage collection
// then frees the blobs no kept manifest references.
func runGCRemote(ctx context.Context, e *env, o *gcOptions) error {
	if o.keep < 1 {
		return usageError{errors.New("gc --remote: --keep must be >= 1")}
	}
	repo, err := o.oci.open(e)
	if err != nil {
		return err
	}
	removed, err := repo.GC(ctx, o.keep, o.dryRun)
	err = registryErr(err)
	if o.json {
		tags := []string{}
		for _, g := range removed {
			tags = append(tags, g.Tag)
		}
		if jerr := writeJSON(e.stdout, map[string]any{"repository": repo.Name(), "removed": tags, "dry_run": o.dryRun}); jerr != nil && err == nil {
			err = jerr
		}
	} else {
		verb := "deleted"
		if o.dryRun {
			verb = "would delete"
		}
		for _, g := range removed {
			fmt.Fprintf(e.stdout, "%s %s:%s %s\n", verb, repo.Name(), g.Tag, g.Manifest.Digest)
		}
		fmt.Fprintf(e.stdout, "%s %s; run the registry's garbage collection to free their blobs\n", verb, plural(len(removed), "generation manifest"))
	}
	return err
}
