package pipeline

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHealthStuckRequest: /healthz turns 503 when a request admitted more
// than StuckAfter ago is not done (the ring write is held), and ok again
// once it completes. The clock is injected: no sleeps.
func TestHealthStuckRequest(t *testing.T) {
	f := newFixture(t)
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	bfs := &blockFS{entered: make(chan struct{}), release: make(chan struct{})}
	f.start(t, func(c *Config, d *Deps) { c.StuckAfter = time.Hour; d.FS = bfs; d.Now = now })
	healthz := func() (int, string) {
		rec := httptest.NewRecorder()
		f.d.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := healthz(); code != 200 {
		t.Fatalf("idle: %d %s", code, body)
	}
	request(t, f.dir, 1, publish(t, f.dir, 1))
	<-bfs.entered // gen 1 is in the build stage, held
	if code, body := healthz(); code != 200 {
		t.Fatalf("in flight, not yet stuck: %d %s", code, body)
	}
	skew.Store(int64(2 * time.Hour))
	if code, body := healthz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "stuck: a request admitted 2h0m") {
		t.Fatalf("stuck: %d %s", code, body)
	}
	close(bfs.release)
	f.wait(t, 1)
	if code, body := healthz(); code != 200 || !strings.HasPrefix(body, "ok gen=1") {
		t.Fatalf("after completion: %d %s", code, body)
	}
	// Stage lines at info, durations included.
	logs := f.logs.String()
	for _, want := range []string{`level=INFO msg="stage started" stage=prepare gen=1`, `level=INFO msg="stage started" stage=encode gen=1`,
		`level=INFO msg="stage finished" stage=encode gen=1 duration=`, `level=INFO msg="stage finished" stage=state gen=1 duration=`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	f.stop(t)
	if code, _ := healthz(); code != http.StatusServiceUnavailable {
		t.Fatalf("stopped: %d", code)
	}
}

// TestCountersAtZeroFromStart: every labelled counter has its series
// before the first event.
func TestCountersAtZeroFromStart(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	defer f.stop(t)
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	for name, n := range map[string]int{"snapd_requests_total": len(requestResults), "snapd_failures_total": len(failureStages),
		"snapd_retries_total": len(retryStages), "snapd_bytes_total": len(byteKinds), "snapd_pull_request_reviews_total": len(reviewEvents),
		"snapd_pushes_total": len(pushResults), "snapd_push_pending": 1, "snapd_push_needs_attention": 1,
		"snapd_push_in_progress": 1, "snapd_push_in_progress_started_timestamp_seconds": 1, "snapd_push_in_progress_bytes_sent": 1, "snapd_push_duration_seconds": 1,
		"snapd_request_to_pushed_seconds": 1, "snapd_last_push_success_timestamp_seconds": 1} {
		if series[name] != n {
			t.Errorf("%s: %d series at start, want %d", name, series[name], n)
		}
	}
}
