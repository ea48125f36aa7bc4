package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/safeopen"
)

// KindOCIGeneration is the queue.Publish kind of a generation published
// through an OCI registry (skeleton layout).
const KindOCIGeneration = "oci-generation"

// OCIStatsFile (in the state directory) holds the registry upload totals
// `snapd status` shows.
const OCIStatsFile = "oci-stats.json"

// OCIConfig configures OCIPublisher.
type OCIConfig struct {
	// StateDir receives OCIStatsFile.
	StateDir string
	// SegmentSize is the target segment blob size (0: wtxt.DefaultSegmentSize).
	SegmentSize int64
	// DenseSegmentSize (0: none) is the target size while generations
	// change nearly every chunk: once at least 90% of a generation's
	// chunks changed (the direct path compares its skeleton with the
	// previous one, chunkChange; a queue job's push is judged by the
	// segments it uploaded, and only when cut at the same size as the
	// push before it, since a new size uploads every segment once),
	// later generations are cut at DenseSegmentSize, until fewer than
	// half changed; the direct path then also makes each array of up
	// to wholeArrayMax bytes one segment (wholeArray). Fewer, larger
	// blobs cost the registry less per byte
	// (a dense 1 GiB generation to a local distribution registry: 16 MiB
	// segments about 12% faster than 4 MiB), and dense updates share no
	// segment between generations anyway; sparse ones keep the small
	// segments that make their uploads small. Each upload holds one
	// segment in memory.
	DenseSegmentSize int64
	// Threshold: a generation whose WTXT is larger than this many bytes goes
	// the skeleton layout; smaller ones are committed whole as before (still
	// through the queue, so generations land in order). 0: every generation.
	Threshold int64
	// Logger: nil discards. Never receives credentials.
	Logger *slog.Logger
}

// OCIPublisher is the Publisher of the skeleton layout. Its Publish
// leaves each generation to the resend queue as one KindOCIGeneration job
// (Jobs does it): upload the segment blobs the registry lacks (HEAD first,
// parallel, bounded), push the config blob and the manifest tagged
// gen-NNNNNN, and only then commit the skeleton to Git (signed as any
// generation, through commitGeneration); the queue then pushes the
// commit. Every step re-checks what is done (registry HEAD, Git branch
// head), so a crash or an outage at any point repeats no finished upload
// and no commit: a blob interrupted mid-upload is uploaded again.
type OCIPublisher struct {
	reg  *oci.Repository
	repo *gitops.Repo
	cfg  OCIConfig
	log  *slog.Logger

	uploaded, skipped, mounted prometheus.Counter
	generations                prometheus.Counter

	mu sync.Mutex // OCIStatsFile

	// prevMu guards prevKeys: the segments of the last generation this
	// process pushed, by key, so the next push reads, decodes and hashes
	// only segments whose chunks changed (oci.PushWTXTAt; empty after a
	// restart, when every segment is checked again).
	prevMu   sync.Mutex
	prevKeys oci.Previous
	// cacheIdle counts the direct pushes in a row whose segment cache
	// recognised no segment (a dense update: every segment changes);
	// guarded by prevMu (useSegmentCache).
	cacheIdle int
	// segDense: generations are cut at DenseSegmentSize; lastSeg is the
	// size the last push was cut at (0: none yet). Guarded by prevMu.
	segDense bool
	lastSeg  int64
	// lastSkel is the last direct push's skeleton, parsed (ocidirect.go:
	// lastSkeleton); guarded by prevMu.
	lastSkel *wtxt.PrevSkeleton

	// read counts the bytes of the WTXT being uploaded that the split has
	// read (snapd_oci_pending_bytes subtracts them; segments known from
	// the previous generation are not read).
	read atomic.Int64

	// pushes learns each committed generation's request time, so the
	// push of its commit is observed in snapd_request_to_pushed_seconds
	// (set by New from Deps.Pushes; nil: not observed).
	pushes atomic.Pointer[PushObserver]
}

// NewOCIPublisher returns the publisher committing into repo and uploading
// to reg.
func NewOCIPublisher(reg *oci.Repository, repo *gitops.Repo, cfg OCIConfig) (*OCIPublisher, error) {
	if reg == nil || repo == nil || cfg.StateDir == "" {
		return nil, errors.New("pipeline: OCI publisher needs a registry, a Git repository and a state dir")
	}
	if cfg.SegmentSize < 0 || cfg.DenseSegmentSize < 0 || cfg.Threshold < 0 {
		return nil, errors.New("pipeline: OCI segment sizes and threshold must be >= 0")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &OCIPublisher{reg: reg, repo: repo, cfg: cfg, log: log,
		uploaded: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapd_oci_bytes_uploaded_total",
			Help: "Segment bytes uploaded to the OCI registry."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapd_oci_bytes_skipped_total",
			Help: "Segment bytes not uploaded because the registry already had them (HEAD) or the generation repeats them."}),
		mounted: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapd_oci_bytes_mounted_total",
			Help: "Segment bytes mounted from the base repository instead of uploaded."}),
		generations: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapd_oci_generations_total",
			Help: "Generation manifests pushed to the OCI registry."}),
	}, nil
}

// Repository returns the registry repository HOST[:PORT]/NAME.
func (p *OCIPublisher) Repository() string { return p.reg.Name() }

// collectors are registered by New; snapd_oci_pending_bytes is added there
// (it reads the queue).
func (p *OCIPublisher) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.uploaded, p.skipped, p.mounted, p.generations}
}

// OCIStats is OCIStatsFile's content.
type OCIStats struct {
	Repository    string `json:"repository"`
	UploadedBytes int64  `json:"uploaded_bytes"` // totals since the state dir was made
	SkippedBytes  int64  `json:"skipped_bytes"`
	MountedBytes  int64  `json:"mounted_bytes"`
	Generations   int64  `json:"generations"`
	// Last is the newest generation uploaded.
	Last *OCIGenStats `json:"last,omitempty"`
	// PendingBytes (filled by ReadStatus from the queue): WTXT bytes of
	// generations whose manifest is not in the registry yet; Publishing
	// counts generations not yet committed.
	PendingBytes int64 `json:"pending_bytes"`
	Publishing   int   `json:"publishing"`
}

// OCIGenStats is one generation's upload.
type OCIGenStats struct {
	Gen           uint64    `json:"gen"`
	Tag           string    `json:"tag"`
	Manifest      string    `json:"manifest"`
	Segments      int       `json:"segments"`
	UploadedBytes int64     `json:"uploaded_bytes"`
	SkippedBytes  int64     `json:"skipped_bytes"`
	MountedBytes  int64     `json:"mounted_bytes"`
	Time          time.Time `json:"time"`
}

// ReadOCIStats reads OCIStatsFile; nil when there is none.
func ReadOCIStats(stateDir string) (*OCIStats, error) {
	f, err := safeopen.Open(filepath.Join(stateDir, OCIStatsFile), safeopen.NoFollow)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var s OCIStats
	dec := json.NewDecoder(&limitedReader{r: f, n: maxStateBytes})
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", OCIStatsFile, err)
	}
	return &s, nil
}

type limitedReader struct {
	r interface{ Read([]byte) (int, error) }
	n int64
}

func (l *limitedReader) Read(b []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("file too large")
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	n, err := l.r.Read(b)
	l.n -= int64(n)
	return n, err
}

func (p *OCIPublisher) record(g OCIGenStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, err := ReadOCIStats(p.cfg.StateDir)
	if err != nil || s == nil {
		s = &OCIStats{}
	}
	s.Repository = p.reg.Name()
	s.UploadedBytes += g.UploadedBytes
	s.SkippedBytes += g.SkippedBytes
	s.MountedBytes += g.MountedBytes
	s.Generations++
	s.Last = &g
	s.PendingBytes, s.Publishing = 0, 0
	b, _ := json.Marshal(s)
	if err := atomicfile.WriteFile(filepath.Join(p.cfg.StateDir, OCIStatsFile), append(b, '\n'), 0o644); err != nil {
		p.log.Warn("oci: write stats", "error", err)
	}
}

// ociState is a KindOCIGeneration job's progress (queue.Publish.State),
// recorded once the manifest is in the registry: where the blobs are, the
// skeleton written while uploading (in hold/) and the upload's byte
// counts. Its keys are those the job file's format before State had in
// publish itself (the queue reads such files into this state).
type ociState struct {
	Repository string `json:"repository,omitempty"`
	Manifest   string `json:"manifest,omitempty"`
	// Tag: the manifest's tag when it is not gen-NNNNNN (a re-used number,
	// oci.ReusedTag); recorded in generation.txt as oci_tag.
	Tag      string `json:"tag,omitempty"`
	Skeleton string `json:"skeleton,omitempty"`
	// Direct: the build pushed the generation (ocidirect.go); the job's
	// held file is its skeleton, and only the commit is left.
	Direct        bool  `json:"direct,omitempty"`
	UploadedBytes int64 `json:"uploaded_bytes,omitempty"`
	SkippedBytes  int64 `json:"skipped_bytes,omitempty"`
}

// Publish implements Publisher: it leaves g to a KindOCIGeneration queue
// job (whose queue.Publisher is Jobs). g.Header nil is read from the
// WTXT.
func (p *OCIPublisher) Publish(ctx context.Context, g Generation) (Published, error) {
	if g.OCI != nil {
		return p.publishDirect(g)
	}
	h := g.Header
	if h == nil {
		f, err := os.Open(g.WTXT)
		if err != nil {
			return Published{}, err
		}
		h, err = gitops.ParseHeader(f)
		if err == nil && h.Pending {
			err = errors.New("the header's root is pending")
		}
		if err == nil {
			// The metadata encoded into it (the Snapd-Meta trailer).
			if st, serr := f.Stat(); serr == nil {
				h.Meta, err = wtxt.ReadUserMeta(ctx, g.WTXT, f, st.Size())
			}
		}
		f.Close()
		if err != nil {
			return Published{}, fmt.Errorf("ring generation %d has no usable header: %w", g.Gen, err)
		}
	}
	st, err := os.Stat(g.WTXT)
	if err != nil {
		return Published{}, err
	}
	// The request time is kept in the job for the request-to-pushed
	// latency, which then covers the upload too and survives a restart.
	return Published{Pending: "pending (registry job)",
		Job: &queue.Publish{Kind: KindOCIGeneration, WTXT: g.WTXT, Bytes: st.Size(), Header: h, Requested: g.Requested.UTC(), ResumedFrom: g.ResumedFrom}}, nil
}

// publishDirect leaves the commit of a generation the build pushed
// (g.Skeleton, g.OCI, g.Header) to a KindOCIGeneration job whose held file
// is the skeleton.
func (p *OCIPublisher) publishDirect(g Generation) (Published, error) {
	if g.Header == nil || g.Skeleton == "" {
		return Published{}, fmt.Errorf("ring generation %d: a pushed generation needs its header and skeleton", g.Gen)
	}
	st, err := os.Stat(g.Skeleton)
	if err != nil {
		return Published{}, err
	}
	b, err := json.Marshal(ociState{Repository: g.OCI.Repository, Manifest: g.OCI.Manifest, Tag: g.OCI.Tag, Direct: true})
	if err != nil {
		return Published{}, err
	}
	return Published{Pending: "pending (registry job: commit)",
		Job: &queue.Publish{Kind: KindOCIGeneration, WTXT: g.Skeleton, Bytes: st.Size(), Header: g.Header, Requested: g.Requested.UTC(),
			ResumedFrom: g.ResumedFrom, Sent: true, State: b}}, nil
}

// segmentSize is the target segment size of both paths (the split's
// default when not configured; DenseSegmentSize while updates are
// dense), so that they cut the same segments.
func (p *OCIPublisher) segmentSize() int64 {
	p.prevMu.Lock()
	defer p.prevMu.Unlock()
	return p.sizeFor(p.segDense)
}

// sizeFor is the segment size in dense mode or not.
func (p *OCIPublisher) sizeFor(dense bool) int64 {
	switch {
	case dense && p.cfg.DenseSegmentSize > 0:
		return p.cfg.DenseSegmentSize
	case p.cfg.SegmentSize > 0:
		return p.cfg.SegmentSize
	}
	return wtxt.DefaultSegmentSize
}

// resumeSegments sets the segment mode from the head generation's record
// (a start: its segment size says whether the run was in dense mode).
func (p *OCIPublisher) resumeSegments(seg int64) {
	p.prevMu.Lock()
	defer p.prevMu.Unlock()
	if p.lastSeg == 0 && seg > 0 {
		p.lastSeg = seg
		p.segDense = p.cfg.DenseSegmentSize > 0 && seg == p.cfg.DenseSegmentSize && seg != p.sizeFor(false)
	}
}

// nextDense is the segment mode after a push of segments segments, of
// which uploaded were uploaded, cut at seg bytes where the push before it
// was cut at prevSeg: judged only when both were cut alike.
func nextDense(dense bool, seg, prevSeg int64, segments, uploaded int) bool {
	if seg != prevSeg {
		return dense
	}
	return judgeDense(dense, int64(segments), int64(uploaded))
}

// judgeDense is the segment mode after a generation in which changed of
// its total parts (segments uploaded, or chunks) changed: dense from 90%,
// sparse below half, else as before.
func judgeDense(dense bool, total, changed int64) bool {
	switch {
	case total <= 0:
		return dense
	case changed*10 >= total*9:
		return true
	case changed*2 < total:
		return false
	}
	return dense
}

// chunkChange is how many of a generation's chunks changed against the
// generation before it (wtxt.PrevSkeleton.ChangedChunks).
type chunkChange struct{ changed, total int64 }

// wholeArrayMax is the largest array the direct path makes one segment
// while updates are dense (wholeArray): wtxt.DefaultMaxSegment, the
// largest segment snapd cuts anywhere else (a single chunk above it is
// refused), so no blob is larger than what other writers make.
const wholeArrayMax = wtxt.DefaultMaxSegment

// wholeArray is the direct path's oci.FilePush.WholeArray: wholeArrayMax
// while updates are dense (and a dense segment size is configured), else
// 0.
func (p *OCIPublisher) wholeArray() int64 {
	p.prevMu.Lock()
	defer p.prevMu.Unlock()
	if p.segDense && p.cfg.DenseSegmentSize > 0 {
		return wholeArrayMax
	}
	return 0
}

// previous returns the segments of the last generation this process
// pushed.
func (p *OCIPublisher) previous() oci.Previous {
	p.prevMu.Lock()
	defer p.prevMu.Unlock()
	return p.prevKeys
}

// cacheRetry: while dense updates leave the segment cache idle, it is
// used again (to notice the updates getting sparse) every cacheRetry-th
// generation.
const cacheRetry = 8

// useSegmentCache reports whether the direct push of generation gen
// uses the segment cache: not while it recognised nothing in the
// previous push (its keyed BLAKE3 of every byte would be wasted on a
// dense update), except every cacheRetry-th generation.
func (p *OCIPublisher) useSegmentCache(gen uint64) bool {
	p.prevMu.Lock()
	defer p.prevMu.Unlock()
	return p.cacheIdle == 0 || gen%cacheRetry == 0
}

// cacheUsed records what the segment cache did in a direct push that
// used it (with a previous skeleton to recognise segments by).
func (p *OCIPublisher) cacheUsed(res *oci.PushResult) {
	p.prevMu.Lock()
	defer p.prevMu.Unlock()
	if res.CacheHits == 0 && res.Segments > 0 {
		p.cacheIdle++
	} else {
		p.cacheIdle = 0
	}
}

// forgetPrevious drops them (a blob was deleted from under the previous
// manifest: the next push HEADs every blob).
func (p *OCIPublisher) forgetPrevious() {
	p.prevMu.Lock()
	p.prevKeys = oci.Previous{}
	p.prevMu.Unlock()
}

// pushed records generation gen's push: its segments for the next one,
// the metrics and OCIStatsFile.
func (p *OCIPublisher) pushed(gen uint64, res *oci.PushResult, seg int64, change *chunkChange) {
	p.prevMu.Lock()
	p.prevKeys = res.Keys
	var dense bool
	if change != nil {
		dense = judgeDense(p.segDense, change.total, change.changed)
	} else {
		dense = nextDense(p.segDense, seg, p.lastSeg, res.Segments, res.Uploaded)
	}
	if dense != p.segDense {
		args := []any{"gen", gen, "segments", res.Segments, "uploaded", res.Uploaded}
		if change != nil {
			args = append(args, "chunks", change.total, "changed_chunks", change.changed)
		}
		p.log.Info("registry segments: the next generations are cut at a new size", append(args, "segment_size", p.sizeFor(dense), "dense", dense)...)
		p.segDense = dense
	}
	p.lastSeg = seg
	p.prevMu.Unlock()
	p.uploaded.Add(float64(res.UploadedBytes))
	p.skipped.Add(float64(res.SkippedBytes))
	p.mounted.Add(float64(res.MountedBytes))
	p.generations.Inc()
	p.record(OCIGenStats{Gen: gen, Tag: res.Tag, Manifest: res.Manifest.Digest.String(), Segments: res.Segments,
		UploadedBytes: res.UploadedBytes, SkippedBytes: res.SkippedBytes, MountedBytes: res.MountedBytes, Time: time.Now().UTC()})
}

// Recover implements Publisher: a generation not in Git is queued again
// (ErrPublished when it is in Git, or was pushed and then pruned from the
// local repository; the queue refuses a second job for one it holds).
func (p *OCIPublisher) Recover(ctx context.Context, g Generation) (Published, error) {
	if _, err := p.repo.ResolveGen(g.Gen); err == nil || errors.Is(err, gitops.ErrPruned) {
		return Published{}, fmt.Errorf("%w: gen %d is committed", ErrPublished, g.Gen)
	}
	return p.Publish(ctx, g)
}

// Jobs returns the queue.Publisher of this publisher's KindOCIGeneration
// jobs (the daemon's queue.Options.Publisher).
func (p *OCIPublisher) Jobs() queue.Publisher { return ociJobs{p} }

// ociJobs does KindOCIGeneration queue jobs.
type ociJobs struct{ p *OCIPublisher }

// Publish implements queue.Publisher for KindOCIGeneration jobs.
func (w ociJobs) Publish(ctx context.Context, j queue.Job, save func(queue.Job) error) (queue.Job, error) {
	p := w.p
	if j.Publish == nil || j.Publish.Kind != KindOCIGeneration || j.Publish.Header == nil {
		return j, localErr(j, fmt.Errorf("job %s: not a %s job with a header", j.ID(), KindOCIGeneration))
	}
	pub := *j.Publish
	h := pub.Header
	var state ociState
	if len(pub.State) > 0 {
		if err := json.Unmarshal(pub.State, &state); err != nil {
			return j, localErr(j, fmt.Errorf("job %s: state: %w", j.ID(), err))
		}
	}
	// A generation the build pushed (state.Direct) or the split below
	// pushed before a restart has its manifest already.
	skeleton := state.Manifest != "" || pub.Bytes > p.cfg.Threshold
	if skeleton && state.Manifest == "" {
		f, err := safeopen.Open(pub.WTXT, safeopen.NoFollow)
		if err != nil {
			return j, localErr(j, fmt.Errorf("held WTXT of gen %d: %w", j.Gen, err))
		}
		defer f.Close()
		skel := pub.WTXT + ".skel"
		out, err := atomicfile.Create(skel, 0o644)
		if err != nil {
			return j, err
		}
		defer out.Abort()
		st, err := f.Stat()
		if err != nil {
			return j, localErr(j, fmt.Errorf("held WTXT of gen %d: %w", j.Gen, err))
		}
		p.read.Store(0)
		seg := p.segmentSize()
		res, err := p.reg.PushWTXTAt(ctx, &countingReaderAt{r: f, n: &p.read}, st.Size(), fmt.Sprintf("gen %s", h.Root.Gen), out, seg, p.previous())
		defer p.read.Store(0)
		if err != nil {
			if errors.Is(err, oci.ErrManifestBlobUnknown) {
				// A blob was deleted from under the previous manifest:
				// the retry HEADs every blob and uploads what is gone.
				p.forgetPrevious()
			}
			return j, registryErr(j, err)
		}
		if err := out.Commit(); err != nil {
			return j, err
		}
		p.pushed(j.Gen, res, seg, nil)
		state = ociState{Repository: p.reg.Name(), Manifest: res.Manifest.Digest.String(), Tag: reusedTag(h.Root.Gen, res.Tag), Skeleton: skel,
			UploadedBytes: res.UploadedBytes, SkippedBytes: res.SkippedBytes}
		b, err := json.Marshal(state)
		if err != nil {
			return j, localErr(j, err)
		}
		pub.State, pub.Sent = b, true
		j.Publish = &pub
		if err := save(j); err != nil {
			return j, err
		}
	}
	// The ledger: only now, with every blob and the manifest in the
	// registry, is the generation committed.
	g := Generation{Gen: j.Gen, WTXT: pub.WTXT, Header: h, ResumedFrom: pub.ResumedFrom}.ledger()
	if skeleton {
		g.Skeleton = state.Skeleton
		if state.Direct {
			g.WTXT, g.Skeleton = "", pub.WTXT // the held file is the skeleton
		}
		g.OCI = &gitops.OCIRef{Repository: state.Repository, Manifest: state.Manifest, Tag: state.Tag}
	}
	res, err := commitGeneration(ctx, p.repo, p.pushes.Load(), g, pub.Requested)
	if errors.Is(err, gitops.ErrGenOrder) {
		// Committed before, and a later generation too (the queue runs in
		// order, so this is a job re-run after its commit was pushed).
		if c, rerr := p.repo.ResolveGen(j.Gen); rerr == nil {
			j.Commit, j.Tag = c, p.repo.TagName(h.Root.Gen)
			p.pushes.Load().expect(j.Commit, pub.Requested)
			return j, nil
		}
	}
	if err != nil {
		return j, localErr(j, fmt.Errorf("commit gen %d: %w", j.Gen, err))
	}
	j.Commit, j.Tag, j.Added = res.Commit.String(), res.Tag, res.BytesWritten
	p.log.Info("oci generation committed", "gen", j.Gen, "layout", res.Layout, "commit", j.Commit, "manifest", state.Manifest)
	return j, nil
}

// localErr stops the queue until a person acts (snapd queue retry/drop).
func localErr(j queue.Job, err error) error {
	return &gitops.PushError{Remote: "local", Branch: j.Branch, Kind: gitops.ErrLocal, Err: err}
}

// registryErr classes a registry failure: a refused credential stops the
// queue as an authentication failure (re-checked every auth_recheck); a
// stalled registry (oci.ErrStalled: store.oci.timeout or stall_timeout
// ran out) is retryable, as is anything else (unreachable, 5xx, a reset
// upload).
func registryErr(j queue.Job, err error) error {
	var ec *errcode.ErrorResponse
	if errors.As(err, &ec) && (ec.StatusCode == http.StatusUnauthorized || ec.StatusCode == http.StatusForbidden) {
		return &gitops.PushError{Remote: "oci registry", Branch: j.Branch, Kind: gitops.ErrAuth, Err: err}
	}
	if errors.Is(err, oci.ErrStalled) {
		return &gitops.PushError{Remote: "oci registry", Branch: j.Branch, Kind: gitops.ErrRetryable, Err: err}
	}
	return err
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r interface {
		ReadAt([]byte, int64) (int, error)
	}
	n *atomic.Int64
}

func (c *countingReaderAt) ReadAt(b []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(b, off)
	c.n.Add(int64(n))
	return n, err
}

// ociPendingGauge reports the WTXT bytes of queued generations whose
// manifest is not in the registry yet, less what the generation being
// uploaded has already read (up to store.oci.jobs segments of that are
// still in flight).
func ociPendingGauge(q func() *queue.Queue, p *OCIPublisher) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "snapd_oci_pending_bytes",
		Help: "WTXT bytes of queued generations not yet sent to the OCI registry (the generation uploading counts what it has not read yet)."},
		func() float64 {
			qq := q()
			if qq == nil {
				return 0
			}
			st, err := qq.Status()
			if err != nil {
				return 0
			}
			return float64(max(0, st.PublishPendingBytes-p.read.Load()))
		})
}

// attach checks the daemon's collaborators and registers the metrics
// (present at zero from the start).
func (p *OCIPublisher) attach(d *Daemon, reg prometheus.Registerer) error {
	if d.deps.Repo == nil || d.deps.Queue == nil {
		return errors.New("pipeline: an OCIPublisher needs Deps.Repo and Deps.Queue")
	}
	if len(d.cfg.Recipients) > 0 || d.cfg.Stream {
		return errors.New("pipeline: the OCI skeleton layout supports neither encryption nor streaming WTXT")
	}
	for _, c := range append(p.collectors(), ociPendingGauge(func() *queue.Queue { return d.deps.Queue }, p)) {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("pipeline: metrics: %w", err)
		}
	}
	p.pushes.Store(d.deps.Pushes)
	return nil
}

// LocalOnly is the Pusher of a queue without a Git remote: the local
// commit is all there is to do.
type LocalOnly struct{}

// Push implements gitops.Pusher; it does nothing.
func (LocalOnly) Push(context.Context, gitops.PushRequest) error { return nil }

// reusedTag returns tag when it is not generation genText's default tag
// (a re-use tag, oci.ReusedTag), else "": what generation.txt's oci_tag
// records.
func reusedTag(genText, tag string) string {
	if tag == oci.Tag(genText) {
		return ""
	}
	return tag
}
