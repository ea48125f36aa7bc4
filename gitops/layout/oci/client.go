package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/keys"
)

// Options configure a Repository.
type Options struct {
	// Insecure allows plain HTTP to a non-loopback host.
	Insecure bool
	// Username and Password (or token) are used when Username is set.
	Username, Password string
	// PasswordFile, with Username, holds the password (or token): it is
	// read (keys.ReadSecretFile: mode 0600 or stricter) whenever the
	// registry asks for credentials, so a rotated token takes effect
	// without a restart. It takes precedence over Password.
	PasswordFile string
	// DockerConfig is the path of a Docker config.json; "" means
	// $DOCKER_CONFIG/config.json or ~/.docker/config.json. Used when
	// Username is empty; a missing file means anonymous access.
	DockerConfig string
	// MountFrom names another repository of the same registry (e.g. the
	// base model's) from which missing blobs are mounted instead of
	// uploaded when it has them (cross-repository blob mount).
	MountFrom string
	// Concurrency bounds parallel blob uploads (default 4).
	Concurrency int
	// Timeouts bound every request to the registry (zero fields: the
	// defaults); a request that runs out of one fails with an error
	// wrapping ErrStalled.
	Timeouts Timeouts
	// HTTPClient, when set, supplies the base transport (its Transport;
	// nil: http.DefaultTransport) in place of the one NewHTTPClient
	// builds; the response-header and stall timeouts still apply (its
	// connect and TLS limits are its own).
	HTTPClient *http.Client
	// Logger receives progress (nil: discard). It never receives secrets.
	Logger *slog.Logger
}

// Repository is one OCI repository holding snapd generations.
type Repository struct {
	repo *remote.Repository
	base *remote.Repository // MountFrom, or nil
	name string             // HOST[:PORT]/NAME
	log  *slog.Logger
	jobs int
}

// IsLoopback reports whether host (without port) is a loopback name or
// address.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// nonLoopbackBlocked is oras-go's default realm denylist without the
// loopback ranges.
func nonLoopbackBlocked() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range auth.DefaultBlockedRealmPrefixes() {
		if !p.Addr().IsLoopback() {
			out = append(out, p)
		}
	}
	return out
}

// Open returns the repository named ref (HOST[:PORT]/NAME, no tag).
func Open(ref string, opts Options) (*Repository, error) {
	r, err := registry.ParseReference(ref)
	if err != nil || r.Reference != "" {
		return nil, fmt.Errorf("oci repository %q: want HOST[:PORT]/NAME (no tag or digest)", ref)
	}
	repo, err := remote.NewRepository(r.Registry + "/" + r.Repository)
	if err != nil {
		return nil, fmt.Errorf("oci repository %q: %w", ref, err)
	}
	host := r.Registry
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	repo.PlainHTTP = opts.Insecure || IsLoopback(host)
	var base http.RoundTripper
	if opts.HTTPClient != nil {
		base = opts.HTTPClient.Transport
		if base == nil {
			base = http.DefaultTransport
		}
	}
	hc := NewHTTPClient(opts.Timeouts, base)
	client := &auth.Client{Client: hc, Cache: auth.NewCache(), ClientID: "snapd"}
	if IsLoopback(host) {
		// A registry on this machine may send clients to a token server on
		// this machine; oras-go refuses loopback realms by default (they
		// would let a remote registry aim the client at local services).
		client.BlockedRealmPrefixes = nonLoopbackBlocked()
	}
	switch {
	case opts.Username != "" && opts.PasswordFile != "":
		user, file, host := opts.Username, opts.PasswordFile, r.Registry
		client.Credential = func(_ context.Context, hostport string) (auth.Credential, error) {
			if hostport != host {
				return auth.EmptyCredential, nil
			}
			b, err := keys.ReadSecretFile(file)
			if err != nil {
				return auth.EmptyCredential, fmt.Errorf("registry password file: %w", err)
			}
			return auth.Credential{Username: user, Password: strings.TrimRight(string(b), "\r\n")}, nil
		}
	case opts.Username != "":
		client.Credential = auth.StaticCredential(r.Registry, auth.Credential{Username: opts.Username, Password: opts.Password})
	default:
		var store credentials.Store
		if opts.DockerConfig != "" {
			store, err = credentials.NewStore(opts.DockerConfig, credentials.StoreOptions{})
		} else {
			store, err = credentials.NewStoreFromDocker(credentials.StoreOptions{})
		}
		if err != nil {
			return nil, fmt.Errorf("oci repository %q: docker credentials: %w", ref, err)
		}
		client.Credential = credentials.Credential(store)
	}
	repo.Client = client
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	jobs := opts.Concurrency
	if jobs <= 0 {
		jobs = 4
	}
	out := &Repository{repo: repo, name: r.Registry + "/" + r.Repository, log: log, jobs: jobs}
	if opts.MountFrom != "" {
		b, err := remote.NewRepository(r.Registry + "/" + opts.MountFrom)
		if err != nil {
			return nil, fmt.Errorf("oci mount-from repository %q: %w", opts.MountFrom, err)
		}
		b.PlainHTTP, b.Client = repo.PlainHTTP, repo.Client
		out.base = b
	}
	return out, nil
}

// Name returns HOST[:PORT]/NAME.
func (r *Repository) Name() string { return r.name }

// PushStats counts what a push did.
type PushStats struct {
	Segments      int   // segments in the generation
	Uploaded      int   // blobs uploaded
	UploadedBytes int64 // their bytes
	Mounted       int   // blobs mounted from Options.MountFrom
	MountedBytes  int64
	Skipped       int // blobs already in the registry (or repeated), Reused included
	SkippedBytes  int64
	// Reused counts the segments PushWTXTAt neither read nor decoded: the
	// previous generation had their chunks and the registry their blob.
	Reused int
	// Unproven counts the segments whose chunks the previous generation
	// had (by Previous.Segments) but whose place, size and digest the
	// previous manifest (Previous.Manifest) did not confirm: they were
	// read and checked like changed ones. Non-zero means Previous (e.g.
	// --prev-skeleton) disagrees with the registry.
	Unproven int
	// CacheHits counts the segments whose chunk sums came from
	// Previous.Cache (PushSnapshot).
	CacheHits int64
	Manifest  ocispec.Descriptor
	Tag       string
}

// PushResult is the outcome of PushWTXT.
type PushResult struct {
	PushStats
	Generation Generation
	// Keys are the generation's segments by key (PushWTXTAt only), the
	// Previous of the next generation's push.
	Keys Previous
}

// PushWTXT splits the WTXT read from r, writes its skeleton to skel and
// uploads the segments the registry lacks (HEAD first; at most
// Options.Concurrency uploads at once, each segment held in memory while
// it is uploaded), then the config blob and the manifest tagged
// gen-NNNNNN. The manifest is pushed only after every blob is in. name
// labels the input in errors.
func (r *Repository) PushWTXT(ctx context.Context, in io.Reader, name string, skel io.Writer, segSize int64) (*PushResult, error) {
	gen, st, err := r.UploadSegments(ctx, in, name, skel, segSize)
	if err != nil {
		return nil, err
	}
	return r.finishPush(ctx, gen, st)
}

// finishPush pushes gen's manifest (every blob is in) and logs the push.
func (r *Repository) finishPush(ctx context.Context, gen Generation, st PushStats) (*PushResult, error) {
	return r.finishStarted(ctx, gen, r.startManifest(ctx, gen), st)
}

// finishStarted is finishPush with the manifest's first half started
// (m: startManifest of gen).
func (r *Repository) finishStarted(ctx context.Context, gen Generation, m *manifestStart, st PushStats) (*PushResult, error) {
	desc, tag, err := m.push(ctx)
	if err != nil {
		return nil, err
	}
	st.Manifest, st.Tag = desc, tag
	r.log.Info("oci push", "repository", r.name, "tag", st.Tag, "segments", st.Segments, "reused", st.Reused,
		"uploaded", st.Uploaded, "uploaded_bytes", st.UploadedBytes, "mounted", st.Mounted, "skipped", st.Skipped, "skipped_bytes", st.SkippedBytes)
	return &PushResult{PushStats: st, Generation: gen}, nil
}

// UploadSegments is PushWTXT without the manifest: it splits the WTXT,
// writes the skeleton to skel and uploads the segments the registry lacks.
// It returns the generation (header values and segments) for a manifest.
func (r *Repository) UploadSegments(ctx context.Context, in io.Reader, name string, skel io.Writer, segSize int64) (Generation, PushStats, error) {
	if segSize <= 0 {
		segSize = wtxt.DefaultSegmentSize
	}
	head := &headCapture{max: 64 << 10}
	u := r.newUploader(ctx)
	segs, serr := wtxt.Split(u.gctx, in, io.MultiWriter(skel, head), u.sink, wtxt.SplitOptions{SegmentSize: segSize, File: name})
	st, err := u.wait(ctx, serr)
	if err != nil {
		return Generation{}, st, err
	}
	return r.generation(head, name, segSize, segs, st)
}

// generation builds the Generation of a split whose skeleton's start head
// captured.
func (r *Repository) generation(head *headCapture, name string, segSize int64, segs []wtxt.Segment, st PushStats) (Generation, PushStats, error) {
	h, err := wtxt.ReadHeader(bytes.NewReader(bytes.TrimPrefix(head.buf, []byte(wtxt.SkeletonMagic+"\n"))))
	if err != nil {
		return Generation{}, st, fmt.Errorf("%s: header: %w", name, err)
	}
	gen := GenerationFromHeader(h)
	gen.SegmentSize, gen.Segments = segSize, segs
	st.Segments = len(segs)
	return gen, st, nil
}

// uploader uploads the segments a split hands to sink: HEAD first, then
// mount or upload, at most Options.Concurrency at once.
type uploader struct {
	r    *Repository
	g    *errgroup.Group
	gctx context.Context

	mu                 sync.Mutex
	seen               map[[32]byte]bool
	up, skip, mnt      atomic.Int64
	upBytes, skipBytes atomic.Int64
	mntBytes           atomic.Int64

	// noHead: upload without a HEAD first (FilePush.UploadChanged).
	noHead bool
	// reuse, when set, reports (and counts) a whole-array segment the
	// previous generation proved to hold at the same place (stream).
	reuse func(s wtxt.Segment) bool
	// progress is told of each segment the sink gets (FilePush.Progress).
	progress func(n int64)
	// free holds the copies of finished uploads for the next segments:
	// a push of many new segments then reuses a few buffers (already
	// faulted in) instead of allocating one per segment.
	free chan []byte
}

func (r *Repository) newUploader(ctx context.Context) *uploader {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.jobs)
	return &uploader{r: r, g: g, gctx: gctx, seen: map[[32]byte]bool{}, free: make(chan []byte, r.jobs+1)}
}

// copyOf returns a copy of b in a free buffer when one is large enough.
func (u *uploader) copyOf(b []byte) []byte {
	select {
	case buf := <-u.free:
		if cap(buf) >= len(b) {
			return append(buf[:0], b...)
		}
	default:
	}
	return bytes.Clone(b)
}

// release returns a copy made by copyOf once nothing reads it: after a
// HEAD found the blob, or an upload the registry accepted (it answers
// only once it has read the whole body). After a failure the HTTP
// transport may still hold the body, so such a copy is left to the
// garbage collector.
func (u *uploader) release(buf []byte) {
	select {
	case u.free <- buf:
	default:
	}
}

// wait waits for the uploads and returns the stats; splitErr is the
// split's error. A failed upload cancels the split (with a context error):
// the upload's error is then the cause.
func (u *uploader) wait(ctx context.Context, splitErr error) (PushStats, error) {
	var st PushStats
	werr := u.g.Wait()
	if werr != nil && ctx.Err() == nil {
		return st, werr
	}
	if splitErr != nil {
		return st, splitErr
	}
	st.Uploaded, st.UploadedBytes = int(u.up.Load()), u.upBytes.Load()
	st.Skipped, st.SkippedBytes = int(u.skip.Load()), u.skipBytes.Load()
	st.Mounted, st.MountedBytes = int(u.mnt.Load()), u.mntBytes.Load()
	return st, nil
}

// sink is the split's wtxt.SegmentSink.
func (u *uploader) sink(_ context.Context, s wtxt.Segment, b []byte) error {
	if s.Size == 0 {
		return nil
	}
	if u.progress != nil {
		u.progress(s.Size)
	}
	if u.duplicate(s) {
		return nil
	}
	data := u.copyOf(b)
	u.g.Go(func() error {
		return u.put(s, func() io.Reader { return bytes.NewReader(data) }, func() { u.release(data) })
	})
	return nil
}

// stream is the split's wtxt.SegmentStreamSink (whole-array segments): the
// bytes are uploaded from r, and a segment the previous generation had at
// the same place with the same digest (reuse) is not uploaded again.
func (u *uploader) stream(_ context.Context, s wtxt.Segment, r io.Reader) error {
	if s.Size == 0 {
		return nil
	}
	if u.progress != nil {
		u.progress(s.Size)
	}
	if u.reuse != nil && u.reuse(s) {
		return nil
	}
	if u.duplicate(s) {
		return nil
	}
	u.g.Go(func() error {
		return u.put(s, func() io.Reader { return r }, func() {})
	})
	return nil
}

// duplicate reports (and counts as skipped) a segment whose digest this
// push has already seen.
func (u *uploader) duplicate(s wtxt.Segment) bool {
	u.mu.Lock()
	dup := u.seen[s.Digest]
	u.seen[s.Digest] = true
	u.mu.Unlock()
	if dup {
		u.skip.Add(1)
		u.skipBytes.Add(s.Size)
	}
	return dup
}

// put uploads segment s (HEAD first unless noHead, a mount from the base
// repository when it has the blob) with the bytes body returns (called
// at most once); done is called once nothing reads them any more after
// a success.
func (u *uploader) put(s wtxt.Segment, body func() io.Reader, done func()) error {
	r, gctx := u.r, u.gctx
	desc := SegmentDescriptor(s)
	var ok bool
	var err error
	if !u.noHead {
		ok, err = r.repo.Exists(gctx, desc)
	}
	if err != nil {
		return fmt.Errorf("oci %s: HEAD blob %s (array %s, chunk %d): %w", r.name, desc.Digest, s.Array, s.FirstChunk, err)
	}
	if ok {
		done()
		u.skip.Add(1)
		u.skipBytes.Add(s.Size)
		return nil
	}
	if r.base != nil {
		inBase, err := r.base.Exists(gctx, desc)
		if err != nil {
			return fmt.Errorf("oci %s: HEAD blob %s in %s: %w", r.name, desc.Digest, r.base.Reference.Repository, err)
		}
		if inBase {
			// A registry that cannot mount answers 202 and the
			// bytes are uploaded instead.
			err := r.repo.Mount(gctx, desc, r.base.Reference.Repository, func() (io.ReadCloser, error) {
				return io.NopCloser(body()), nil
			})
			if err != nil {
				return fmt.Errorf("oci %s: mount blob %s from %s: %w", r.name, desc.Digest, r.base.Reference.Repository, err)
			}
			u.mnt.Add(1)
			u.mntBytes.Add(s.Size)
			return nil
		}
	}
	err = r.repo.Push(gctx, desc, body())
	if err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return fmt.Errorf("oci %s: upload blob %s (array %s, chunk %d): %w", r.name, desc.Digest, s.Array, s.FirstChunk, err)
	}
	if err == nil {
		done()
	}
	u.up.Add(1)
	u.upBytes.Add(s.Size)
	return nil
}

// PushManifest uploads g's config blob and its manifest, tagged
// gen-NNNNNN (or, when that tag names another manifest, the next free
// re-use tag: generationTag), returned with it. Every segment blob must
// already be in the registry. The config blob is uploaded without asking
// first (it names the generation, so it is new but for a repeated push,
// which the registry accepts again) while the tag is looked up: two round
// trips fewer before the manifest.
func (r *Repository) PushManifest(ctx context.Context, g Generation) (ocispec.Descriptor, string, error) {
	return r.startManifest(ctx, g).push(ctx)
}

// manifestStart is PushManifest's first half under way: g's config blob
// uploading and its tag being looked up, which need none of the segment
// blobs. A push starts it as soon as its segments are known, while the
// last of them still upload (and the registry fsyncs them), and pushes
// the manifest once they are in.
type manifestStart struct {
	r      *Repository
	mdesc  ocispec.Descriptor
	man    []byte
	tag    string
	err    error // building the config or manifest failed
	eg     *errgroup.Group
	cancel context.CancelFunc
}

// startManifest builds g's config and manifest and starts uploading the
// config blob and looking up the tag; push or abandon ends it.
func (r *Repository) startManifest(ctx context.Context, g Generation) *manifestStart {
	m := &manifestStart{r: r}
	cfg, err := BuildConfig(g)
	if err != nil {
		m.err = err
		return m
	}
	if m.man, err = BuildManifest(g, cfg); err != nil {
		m.err = err
		return m
	}
	m.mdesc = Descriptor(ocispec.MediaTypeImageManifest, m.man)
	m.mdesc.ArtifactType = ArtifactType
	cdesc := Descriptor(ConfigMediaType, cfg)
	ctx, m.cancel = context.WithCancel(ctx)
	eg, ectx := errgroup.WithContext(ctx)
	m.eg = eg
	eg.Go(func() error {
		if err := r.repo.Push(ectx, cdesc, bytes.NewReader(cfg)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return fmt.Errorf("oci %s: upload config blob: %w", r.name, err)
		}
		return nil
	})
	eg.Go(func() error {
		var err error
		m.tag, err = r.generationTag(ectx, g.Gen, m.mdesc)
		return err
	})
	return m
}

// push waits for the config blob and the tag, then pushes the manifest.
func (m *manifestStart) push(ctx context.Context) (ocispec.Descriptor, string, error) {
	if m.err != nil {
		return ocispec.Descriptor{}, "", m.err
	}
	err := m.eg.Wait()
	m.cancel()
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	r := m.r
	if err := r.repo.PushReference(ctx, m.mdesc, bytes.NewReader(m.man), m.tag); err != nil {
		if isBlobUnknown(err) {
			err = fmt.Errorf("%w: %w", ErrManifestBlobUnknown, err)
		}
		return ocispec.Descriptor{}, "", fmt.Errorf("oci %s: push manifest %s: %w", r.name, m.tag, err)
	}
	return m.mdesc, m.tag, nil
}

// abandon stops what startManifest started and waits for it (the push
// failed before its manifest; an uploaded config blob is left to the
// registry's garbage collection, as a failed push's segments are).
func (m *manifestStart) abandon() {
	if m == nil || m.eg == nil {
		return
	}
	m.cancel()
	_ = m.eg.Wait()
}

// generationTag returns the tag gen's manifest mdesc goes under: the
// first of Tag(gen), gen-NNNNNN-r1, -r2, ... (ReusedTag) that the
// registry does not have or that already names mdesc (a repeated push).
// A tag naming another manifest is another generation of the same number
// (one a resumed run abandoned): it is left as it is.
func (r *Repository) generationTag(ctx context.Context, gen string, mdesc ocispec.Descriptor) (string, error) {
	for k := range maxReuses {
		tag := ReusedTag(gen, k)
		cur, err := r.repo.Resolve(ctx, tag)
		switch {
		case isNotFound(err):
			return tag, nil
		case err != nil:
			return "", fmt.Errorf("oci %s: resolve %s: %w", r.name, tag, err)
		case cur.Digest == mdesc.Digest:
			return tag, nil
		}
	}
	return "", fmt.Errorf("oci %s: generation %s: %d tags gen-%s-rK are taken", r.name, gen, maxReuses, gen)
}

// OpenBlob implements wtxt.BlobSource over the registry's blobs.
func (r *Repository) OpenBlob(ctx context.Context, s wtxt.Segment) (io.ReadCloser, error) {
	rc, err := r.repo.Blobs().Fetch(ctx, SegmentDescriptor(s))
	if err != nil {
		if errors.Is(err, errdef.ErrNotFound) {
			return nil, fmt.Errorf("oci %s: %w", r.name, wtxt.ErrBlobNotFound)
		}
		return nil, fmt.Errorf("oci %s: %w", r.name, err)
	}
	return rc, nil
}

// headCapture keeps the first max bytes written to it.
type headCapture struct {
	buf []byte
	max int
}

func (h *headCapture) Write(p []byte) (int, error) {
	if n := h.max - len(h.buf); n > 0 {
		h.buf = append(h.buf, p[:min(n, len(p))]...)
	}
	return len(p), nil
}
