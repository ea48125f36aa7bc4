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
	// Threshold: a generation whose WTXT is larger than this many bytes goes
	// the skeleton layout; smaller ones are committed whole as before (still
	// through the queue, so generations land in order). 0: every generation.
	Threshold int64
	// Logger: nil discards. Never receives credentials.
	Logger *slog.Logger
}

// OCIPublisher is the queue.Publisher of the skeleton layout: for one
// generation it uploads the segment blobs the registry lacks (HEAD first,
// parallel, bounded), pushes the config blob and the manifest tagged
// gen-NNNNNN, and only then commits the skeleton to Git (signed as any
// generation); the queue then pushes the commit. Every step re-checks what
// is done (registry HEAD, Git branch head), so a crash or an outage at any
// point repeats no finished upload and no commit: a blob interrupted
// mid-upload is uploaded again.
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
	if cfg.SegmentSize < 0 || cfg.Threshold < 0 {
		return nil, errors.New("pipeline: OCI segment size and threshold must be >= 0")
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

// Publish implements queue.Publisher for KindOCIGeneration jobs.
func (p *OCIPublisher) Publish(ctx context.Context, j queue.Job, save func(queue.Job) error) (queue.Job, error) {
	if j.Publish == nil || j.Publish.Kind != KindOCIGeneration || j.Publish.Header == nil {
		return j, localErr(j, fmt.Errorf("job %s: not a %s job with a header", j.ID(), KindOCIGeneration))
	}
	pub := *j.Publish
	h := pub.Header
	skeleton := pub.Bytes > p.cfg.Threshold
	if skeleton && pub.Manifest == "" {
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
		p.prevMu.Lock()
		prev := p.prevKeys
		p.prevMu.Unlock()
		res, err := p.reg.PushWTXTAt(ctx, &countingReaderAt{r: f, n: &p.read}, st.Size(), fmt.Sprintf("gen %s", h.Root.Gen), out, p.cfg.SegmentSize, prev)
		defer p.read.Store(0)
		if err != nil {
			if errors.Is(err, oci.ErrManifestBlobUnknown) {
				// A blob was deleted from under the previous manifest:
				// the retry HEADs every blob and uploads what is gone.
				p.prevMu.Lock()
				p.prevKeys = oci.Previous{}
				p.prevMu.Unlock()
			}
			return j, registryErr(j, err)
		}
		p.prevMu.Lock()
		p.prevKeys = res.Keys
		p.prevMu.Unlock()
		if err := out.Commit(); err != nil {
			return j, err
		}
		p.uploaded.Add(float64(res.UploadedBytes))
		p.skipped.Add(float64(res.SkippedBytes))
		p.mounted.Add(float64(res.MountedBytes))
		p.generations.Inc()
		p.record(OCIGenStats{Gen: j.Gen, Tag: res.Tag, Manifest: res.Manifest.Digest.String(), Segments: res.Segments,
			UploadedBytes: res.UploadedBytes, SkippedBytes: res.SkippedBytes, MountedBytes: res.MountedBytes, Time: time.Now().UTC()})
		pub.Repository, pub.Manifest, pub.Skeleton = p.reg.Name(), res.Manifest.Digest.String(), skel
		pub.UploadedBytes, pub.SkippedBytes = res.UploadedBytes, res.SkippedBytes
		j.Publish = &pub
		if err := save(j); err != nil {
			return j, err
		}
	}
	// The ledger: only now, with every blob and the manifest in the
	// registry, is the generation committed.
	g := gitops.Generation{WTXT: pub.WTXT, Header: h}
	if skeleton {
		g.Skeleton = pub.Skeleton
		g.OCI = &gitops.OCIRef{Repository: pub.Repository, Manifest: pub.Manifest}
	}
	res, err := p.repo.Commit(ctx, g)
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
	j.Commit, j.Tag = res.Commit.String(), res.Tag
	p.pushes.Load().expect(j.Commit, pub.Requested)
	p.log.Info("oci generation committed", "gen", j.Gen, "layout", res.Layout, "commit", j.Commit, "manifest", pub.Manifest)
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

// ociEnqueue hands a finished generation to the queue as one publish job
// (upload, manifest, commit, push) instead of committing it here.
// requested (zero: unknown) is kept in the job for the request-to-pushed
// latency, which then covers the upload too and survives a restart.
func (d *Daemon) ociEnqueue(gen uint64, wtxtPath string, h *gitops.Header, requested time.Time) error {
	st, err := os.Stat(wtxtPath)
	if err != nil {
		return err
	}
	j := queue.Job{Branch: d.deps.Repo.Config().Branch, Gen: gen, Enqueued: d.now().UTC(),
		Publish: &queue.Publish{Kind: KindOCIGeneration, WTXT: wtxtPath, Bytes: st.Size(), Header: h, Requested: requested.UTC()}}
	if err := d.deps.Queue.Enqueue(j); err != nil {
		return err
	}
	d.m.pushEnqueued.Inc()
	return nil
}

// ociCommit replaces commit in the skeleton layout.
func (d *Daemon) ociCommit(r *GenResult, head *ChainState, requested time.Time) {
	h, err := head.gitHeader()
	if err == nil {
		err = d.ociEnqueue(r.Gen, r.WTXT, h, requested)
	}
	if err != nil {
		d.log.Error("resend queue: enqueue generation for the registry (re-enqueued at the next start)", "gen", r.Gen, "error", err)
		d.fail("git", r.Gen, err)
	}
}

// ociRecover replaces recommit in the skeleton layout: ring generations up
// to the chain head that are neither in Git nor queued (a crash between
// the chain state and the enqueue) are enqueued, oldest first.
func (d *Daemon) ociRecover() {
	entries, err := ListRing(d.ringDir)
	if err != nil {
		d.log.Warn("recovery: list ring", "error", err)
		return
	}
	head := d.Head()
	for _, e := range entries {
		if e.Gen > head.Gen || e.WTXT == "" {
			continue
		}
		if _, err := d.deps.Repo.ResolveGen(e.Gen); err == nil {
			continue // committed
		}
		var h *gitops.Header
		if e.Gen == head.Gen {
			if h, err = head.gitHeader(); err != nil {
				continue
			}
		} else {
			f, err := os.Open(e.WTXT)
			if err != nil {
				continue
			}
			h, err = gitops.ParseHeader(f)
			f.Close()
			if err != nil || h.Pending {
				d.log.Warn("recovery: ring generation has no usable header", "gen", e.Gen, "error", err)
				continue
			}
		}
		if err := d.ociEnqueue(e.Gen, e.WTXT, h, time.Time{}); err != nil {
			if !errors.Is(err, queue.ErrConflict) {
				d.log.Warn("recovery: enqueue for the registry", "gen", e.Gen, "error", err)
				d.fail("git", e.Gen, err)
			}
			continue
		}
	}
}

// countingReader counts what is read through it.
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

// registerOCI checks Deps.OCI's collaborators and registers its metrics
// (present at zero from the start).
func (d *Daemon) registerOCI(reg prometheus.Registerer) error {
	if d.deps.OCI == nil {
		return nil
	}
	if d.deps.Repo == nil || d.deps.Queue == nil {
		return errors.New("pipeline: Deps.OCI needs Deps.Repo and Deps.Queue")
	}
	if len(d.cfg.Recipients) > 0 || d.cfg.Stream {
		return errors.New("pipeline: the OCI skeleton layout supports neither encryption nor streaming WTXT")
	}
	for _, c := range append(d.deps.OCI.collectors(), ociPendingGauge(func() *queue.Queue { return d.deps.Queue }, d.deps.OCI)) {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("pipeline: metrics: %w", err)
		}
	}
	return nil
}

// LocalOnly is the Pusher of a queue without a Git remote: the local
// commit is all there is to do.
type LocalOnly struct{}

// Push implements gitops.Pusher; it does nothing.
func (LocalOnly) Push(context.Context, gitops.PushRequest) error { return nil }
