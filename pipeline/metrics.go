package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the daemon's Prometheus collectors, registered on the
// registry given in Deps (never the global default registry).
type metrics struct {
	requests     *prometheus.CounterVec   // by result: done, failed, duplicate, coalesced
	snapshots    prometheus.Counter       // generations written to the ring
	bytes        *prometheus.CounterVec   // by kind: source, wtxt, delta
	stage        *prometheus.HistogramVec // seconds by stage
	queueDepth   prometheus.Gauge         // requests admitted, not yet completed
	lastGen      prometheus.Gauge
	failures     *prometheus.CounterVec // by stage
	retries      *prometheus.CounterVec // by stage
	gaps         prometheus.Counter
	lastSuccess  prometheus.Gauge // unix seconds of the last generation
	pushEnqueued prometheus.Counter
	reviews      *prometheus.CounterVec // pull-request reviews posted, by event

	// Pushes, recorded by a PushObserver (observe.go).
	pushes          *prometheus.CounterVec // by result: done, failed
	pushDuration    prometheus.Histogram
	lastPush        prometheus.Gauge
	requestToPushed prometheus.Histogram
}

// Label values created at start, so every series exists (at zero) before
// its first event and alerts on rate() or absence work from the start.
var (
	requestResults = []string{"done", "failed", "duplicate", "coalesced"}
	failureStages  = []string{"admit", "prepare", "build", "ring", "state", "wal", "git", "github", "publish"}
	retryStages    = []string{"prepare", "build"}
	byteKinds      = []string{"source", "wtxt", "delta"}
	reviewEvents   = []string{"APPROVE", "REQUEST_CHANGES", "COMMENT"}
	pushResults    = []string{"done", "failed"}
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapd_requests_total",
			Help: "Snapshot requests read from the WAL, by result (done, failed, duplicate, coalesced)."}, []string{"result"}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapd_snapshots_total",
			Help: "Generations written to the ring."}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapd_bytes_total",
			Help: "Bytes processed, by kind (source read, wtxt written, delta written)."}, []string{"kind"}),
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "snapd_stage_seconds",
			Help:    "Latency of each pipeline stage per generation.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"stage"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapd_queue_depth",
			Help: "Requests admitted and not yet completed."}),
		lastGen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapd_last_generation",
			Help: "Newest generation in the chain."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapd_failures_total",
			Help: "Failures by stage (prepare, build, ring, state, wal, git, github, publish: a rank part the registry refused)."}, []string{"stage"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapd_retries_total",
			Help: "Retried attempts after transient (I/O) errors, by stage."}, []string{"stage"}),
		gaps: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapd_chain_gaps_total",
			Help: "Generations chained to a predecessor other than gen-1."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapd_last_success_timestamp_seconds",
			Help: "When the last generation was completed."}),
		pushEnqueued: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapd_push_enqueued_total",
			Help: "Generations handed to the resend queue."}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapd_pull_request_reviews_total",
			Help: "Pull-request reviews posted after a push, by event (APPROVE, REQUEST_CHANGES, COMMENT)."}, []string{"event"}),
	}
	m.pushes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snapd_pushes_total",
		Help: "Push attempts to the Git remote, by result (done, failed)."}, []string{"result"})
	m.pushDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "snapd_push_duration_seconds",
		Help: "Duration of each push attempt to the Git remote.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)})
	m.lastPush = prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapd_last_push_success_timestamp_seconds",
		Help: "When the last push to the Git remote succeeded (0: none since start)."})
	m.requestToPushed = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "snapd_request_to_pushed_seconds",
		Help:    "From a snapshot request's timestamp to its generation being on the Git remote (skeleton layout: registry upload and manifest included).",
		Buckets: prometheus.ExponentialBuckets(0.1, 4, 10)})
	for _, v := range []struct {
		vec    *prometheus.CounterVec
		values []string
	}{{m.requests, requestResults}, {m.failures, failureStages}, {m.retries, retryStages}, {m.bytes, byteKinds}, {m.reviews, reviewEvents}, {m.pushes, pushResults}} {
		for _, l := range v.values {
			v.vec.WithLabelValues(l)
		}
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.snapshots, m.bytes, m.stage, m.queueDepth, m.lastGen, m.failures, m.retries, m.gaps, m.lastSuccess, m.pushEnqueued, m.reviews,
		m.pushes, m.pushDuration, m.lastPush, m.requestToPushed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
