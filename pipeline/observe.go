package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/queue"
)

// DefaultStuckAfter is Config.StuckAfter's default.
const DefaultStuckAfter = 30 * time.Minute

// PushObserver wraps the Pusher the resend queue runs and records every
// push attempt in the daemon's metrics (snapd_pushes_total, push duration,
// last success, request-to-pushed latency) and its log. Build it with
// ObservePushes before queue.Open, hand the queue the observer as its
// Pusher and its AfterPush as queue.Options.AfterPush (the repository's
// trim and repack after each push), and pass it in Deps.Pushes; until New
// attaches the daemon it only passes pushes through. Safe for concurrent
// use.
type PushObserver struct {
	inner gitops.Pusher

	mu  sync.Mutex
	d   *Daemon
	req map[string]time.Time // commit -> request time (when known)
}

// ObservePushes wraps p.
func ObservePushes(p gitops.Pusher) *PushObserver {
	return &PushObserver{inner: p, req: map[string]time.Time{}}
}

func (o *PushObserver) attach(d *Daemon) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.d = d
}

// expect records when the request for the generation committed as commit
// was made, for the request-to-pushed latency. Commits pushed without an
// expectation (recommitted after a restart) are not observed there.
func (o *PushObserver) expect(commit string, requested time.Time) {
	if o == nil || requested.IsZero() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.req) >= 4096 { // a remote down for very long: forget the oldest view
		clear(o.req)
	}
	o.req[commit] = requested
}

// Push implements gitops.Pusher.
func (o *PushObserver) Push(ctx context.Context, req gitops.PushRequest) error {
	o.mu.Lock()
	d := o.d
	o.mu.Unlock()
	if d == nil {
		return o.inner.Push(ctx, req)
	}
	t := d.now()
	err := o.inner.Push(ctx, req)
	end := d.now()
	dt := end.Sub(t)
	if ctx.Err() != nil {
		return err // abandoned on shutdown: neither done nor failed
	}
	d.m.pushDuration.Observe(dt.Seconds())
	if err != nil {
		d.m.pushes.WithLabelValues("failed").Inc()
		return err
	}
	d.m.pushes.WithLabelValues("done").Inc()
	d.m.lastPush.Set(float64(end.Unix()))
	c := req.Commit.String()
	args := []any{"branch", req.Branch, "commit", c, "tag", req.Tag, "duration", dt}
	o.mu.Lock()
	rt, ok := o.req[c]
	delete(o.req, c)
	o.mu.Unlock()
	if ok {
		lat := end.Sub(rt)
		d.m.requestToPushed.Observe(lat.Seconds())
		args = append(args, "request_to_pushed", lat)
	}
	d.log.Info("pushed", args...)
	return nil
}

// AfterPush is the resend queue's queue.Options.AfterPush: once job j's
// push succeeded and the queue removed it, the local repository's history
// is cut to retention.repo and its packs are maintained (as for every
// commit the daemon pushes). Doing it here rather than in Push keeps the
// housekeeping out of the time to "pushed": snapd wait --pushed sees the
// job gone before it starts. Each step may be interrupted (the daemon
// stopping cancels ctx): the next push's AfterPush finishes it. Until New
// attaches the daemon it does nothing.
func (o *PushObserver) AfterPush(ctx context.Context, j queue.Job) {
	o.mu.Lock()
	d := o.d
	o.mu.Unlock()
	if d == nil || ctx.Err() != nil || !plumbing.IsHash(j.Commit) {
		return
	}
	d.retainRepo(ctx, plumbing.NewHash(j.Commit))
	maintainRepo(ctx, d.log, d.ledger(), j.Branch)
}

// queueCollector exports the resend queue's state, read from its
// directory at every scrape (so `snapd queue retry` from another process
// shows at once): snapd_push_pending and snapd_push_needs_attention, and
// the attempt in progress (queue.PushingFile): snapd_push_in_progress,
// snapd_push_in_progress_started_timestamp_seconds and
// snapd_push_in_progress_bytes_sent; all 0 when there is no queue or no
// attempt.
type queueCollector struct {
	q                       func() *queue.Queue
	pending, needsAttention *prometheus.Desc
	inProgress, started     *prometheus.Desc
	bytesSent               *prometheus.Desc
}

func newQueueCollector(q func() *queue.Queue) *queueCollector {
	return &queueCollector{q: q,
		pending: prometheus.NewDesc("snapd_push_pending", "Generations committed and waiting in the resend queue to be pushed.", nil, nil),
		needsAttention: prometheus.NewDesc("snapd_push_needs_attention",
			"1 when the resend queue stopped until a person acts (authentication refused, remote diverged, push rejected; see snapd queue list).", nil, nil),
		inProgress: prometheus.NewDesc("snapd_push_in_progress", "1 while a push attempt (or its publish work) runs.", nil, nil),
		started: prometheus.NewDesc("snapd_push_in_progress_started_timestamp_seconds",
			"When the push attempt in progress started (0: none); alert on time() minus this.", nil, nil),
		bytesSent: prometheus.NewDesc("snapd_push_in_progress_bytes_sent",
			"Bytes the push in progress has written, from git push's progress line (0: none or not yet).", nil, nil)}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.needsAttention
	ch <- c.inProgress
	ch <- c.started
	ch <- c.bytesSent
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	var pending, attention, running, started, sent float64
	if st := queueStatus(c.q()); st != nil {
		pending = float64(st.Pending)
		if st.State == queue.StateNeedsAttention || st.State == queue.StateCorrupt {
			attention = 1
		}
		if p := st.Pushing; p != nil {
			running, started, sent = 1, float64(p.Since.UnixNano())/1e9, float64(p.BytesSent)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, pending)
	ch <- prometheus.MustNewConstMetric(c.needsAttention, prometheus.GaugeValue, attention)
	ch <- prometheus.MustNewConstMetric(c.inProgress, prometheus.GaugeValue, running)
	ch <- prometheus.MustNewConstMetric(c.started, prometheus.GaugeValue, started)
	ch <- prometheus.MustNewConstMetric(c.bytesSent, prometheus.GaugeValue, sent)
}

// inflight tracks the requests admitted and not yet completed, for
// /healthz's stuck check.
type inflight struct {
	mu    sync.Mutex
	items map[*item]time.Time
}

func (f *inflight) add(it *item) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.items == nil {
		f.items = map[*item]time.Time{}
	}
	f.items[it] = it.admitted
}

func (f *inflight) done(it *item) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.items, it)
}

// oldest returns the admission time of the oldest request in flight.
func (f *inflight) oldest() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var o time.Time
	for _, t := range f.items {
		if o.IsZero() || t.Before(o) {
			o = t
		}
	}
	return o, !o.IsZero()
}

// health reports whether the daemon is healthy and, when not, why:
// stopped; a request admitted more than StuckAfter ago and not completed
// (the pipeline is stuck); the resend queue stopped until a person acts
// (needs attention); or its oldest job was enqueued more than StuckAfter
// ago (pushes keep failing).
func (d *Daemon) health() (bool, string) {
	d.lifeMu.Lock()
	ok := d.started && !d.closed
	d.lifeMu.Unlock()
	if !ok {
		return false, "stopped"
	}
	now, stuck := d.now(), d.config().StuckAfter
	if t, ok := d.inflight.oldest(); ok && now.Sub(t) > stuck {
		return false, fmt.Sprintf("stuck: a request admitted %s ago is not done (stuck_after %s)", now.Sub(t).Round(time.Second), stuck)
	}
	if q := d.deps.Queue; q != nil {
		st, err := q.Status()
		if err != nil {
			return false, fmt.Sprintf("push queue unreadable: %v", err)
		}
		if st.State == queue.StateCorrupt {
			return false, fmt.Sprintf("push queue corrupt: %s (snapd status says how to fix it)", st.Corrupt[0].Error)
		}
		if st.State == queue.StateNeedsAttention {
			kind := ""
			if st.Hold != nil {
				kind = st.Hold.Kind + ": "
			}
			return false, fmt.Sprintf("push queue needs attention: %sfix the cause, then snapd queue retry", kind)
		}
		if jobs, err := q.List(); err == nil && len(jobs) > 0 {
			oldest := jobs[0].Enqueued
			for _, j := range jobs {
				if j.Enqueued.Before(oldest) {
					oldest = j.Enqueued
				}
			}
			if age := now.Sub(oldest); age > stuck {
				return false, fmt.Sprintf("push queue stuck: the oldest job waits for %s (%d pending, state %s; stuck_after %s)", age.Round(time.Second), len(jobs), st.State, stuck)
			}
		}
	}
	return true, ""
}
