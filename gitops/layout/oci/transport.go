package oci

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"oras.land/oras-go/v2/registry/remote/retry"
)

// Default registry timeouts (Timeouts' zero fields), in line with what
// containerd, oras and the docker CLI use: a registry that takes longer
// to connect or to start answering is down or overloaded.
const (
	DefaultConnectTimeout        = 30 * time.Second
	DefaultTLSHandshakeTimeout   = 30 * time.Second
	DefaultResponseHeaderTimeout = 30 * time.Second
	DefaultStallTimeout          = 60 * time.Second
	// DefaultMinRate (bytes per second, averaged over the stall timeout)
	// is what a body must move not to be stalled: far below any working
	// registry, far above a connection that trickles a byte now and then.
	DefaultMinRate = 1024
)

// Timeouts bound every registry request of a Repository: token requests,
// HEADs, manifest and blob GETs, uploads. Zero fields take the defaults
// above; none can be turned off.
type Timeouts struct {
	// Connect bounds the TCP connect, TLSHandshake the TLS handshake.
	Connect, TLSHandshake time.Duration
	// ResponseHeader bounds the wait for a response's headers once the
	// request (body included) is written.
	ResponseHeader time.Duration
	// Stall bounds a body that does not move: a request body the registry
	// does not read, or a response body that does not arrive. A body is
	// stalled when, over Stall of waiting for it, fewer than MinRate bytes
	// per second moved (a registry that sends one byte every few seconds
	// is stalled too). For a response body only the time the reader spends
	// waiting for the registry counts, so a slow consumer (a slow disk, a
	// pipe) is never taken for a stalled registry.
	Stall time.Duration
	// MinRate is in bytes per second (default DefaultMinRate).
	MinRate int64
}

// WithDefaults returns t with its zero fields set to the defaults.
func (t Timeouts) WithDefaults() Timeouts {
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	set(&t.Connect, DefaultConnectTimeout)
	set(&t.TLSHandshake, DefaultTLSHandshakeTimeout)
	set(&t.ResponseHeader, DefaultResponseHeaderTimeout)
	set(&t.Stall, DefaultStallTimeout)
	if t.MinRate <= 0 {
		t.MinRate = DefaultMinRate
	}
	return t
}

// ErrStalled is wrapped by every error of a registry request that ran out
// of one of its Timeouts (a *StallError): the registry accepted the
// connection, or was being connected to, and stopped making progress.
// Retrying later may succeed; the data sent or read so far is discarded.
var ErrStalled = errors.New("registry stalled")

// StallError is a registry request stopped by its Timeouts.
type StallError struct {
	Method string
	// Where is the request's host and path (never its query: upload URLs
	// carry session state there).
	Where string
	// Phase is what did not progress: "connect", "TLS handshake",
	// "response headers", "request body" or "response body".
	Phase string
	// Limit is the timeout that ran out.
	Limit time.Duration
	// Moved is, for a body, the bytes it moved in its last Limit of
	// waiting.
	Moved int64
	// Err is the transport's error for a connect or TLS timeout.
	Err error
}

func (e *StallError) Error() string {
	var what string
	switch e.Phase {
	case "request body", "response body":
		what = fmt.Sprintf("%s stalled: %d bytes moved in %s of waiting", e.Phase, e.Moved, e.Limit)
	case "response headers":
		what = fmt.Sprintf("no response headers within %s of the request", e.Limit)
	default:
		what = fmt.Sprintf("%s timed out after %s", e.Phase, e.Limit)
	}
	return fmt.Sprintf("%s: %s %s: %s", ErrStalled, e.Method, e.Where, what)
}

// Is makes errors.Is(err, ErrStalled) true.
func (e *StallError) Is(target error) bool { return target == ErrStalled }

// Timeout reports true: a StallError is a net.Error timeout, so callers
// that class network failures see it as one.
func (e *StallError) Timeout() bool { return true }

// Temporary reports false (net.Error's deprecated method).
func (e *StallError) Temporary() bool { return false }

// Unwrap returns the transport's error, if any.
func (e *StallError) Unwrap() error { return e.Err }

// NewHTTPClient returns the HTTP client of every registry request: base
// (nil: a transport with t's connect and TLS handshake timeouts, proxies
// from the environment) under a watchdog enforcing t's response-header
// and stall timeouts, under oras-go's retry of 5xx, 429 and resets
// (a stalled request is not retried there: it already waited a full
// timeout; the caller decides).
func NewHTTPClient(t Timeouts, base http.RoundTripper) *http.Client {
	t = t.WithDefaults()
	if base == nil {
		d := &net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}
		base = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           d.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   t.TLSHandshake,
			ExpectContinueTimeout: time.Second,
		}
	}
	rt := retry.NewTransport(&watchdog{base: base, t: t})
	rt.Policy = noStallRetry
	return &http.Client{Transport: rt}
}

// noStallRetry is oras-go's default retry policy without retrying a
// stalled request.
func noStallRetry() retry.Policy {
	return &retry.GenericPolicy{
		Retryable: func(resp *http.Response, err error) (bool, error) {
			if errors.Is(err, ErrStalled) {
				return false, err
			}
			return retry.DefaultPredicate(resp, err)
		},
		Backoff:  retry.DefaultBackoff,
		MinWait:  200 * time.Millisecond,
		MaxWait:  3 * time.Second,
		MaxRetry: 5,
	}
}

// watchdog enforces Timeouts on each round trip through base.
type watchdog struct {
	base http.RoundTripper
	t    Timeouts
}

// reqTrace records how far a round trip got, to name the phase a
// transport timeout hit.
type reqTrace struct {
	mu                 sync.Mutex
	tlsStart, tlsDone  bool
	gotConn            bool
	headerTimer        *time.Timer
	headerDone, header bool // header: the header timer fired
}

func (w *watchdog) RoundTrip(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	ctx, cancel := context.WithCancelCause(parent)
	where := req.URL.Host + req.URL.Path
	stall := func(phase string, limit time.Duration, moved int64) *StallError {
		return &StallError{Method: req.Method, Where: where, Phase: phase, Limit: limit, Moved: moved}
	}
	tr := &reqTrace{}
	var reqMeter *meter
	if req.Body != nil && req.Body != http.NoBody {
		reqMeter = newMeter(w.t, func(moved int64) error {
			se := stall("request body", w.t.Stall, moved)
			cancel(se)
			return se
		})
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		TLSHandshakeStart: func() { tr.mu.Lock(); tr.tlsStart = true; tr.mu.Unlock() },
		TLSHandshakeDone:  func(tls.ConnectionState, error) { tr.mu.Lock(); tr.tlsDone = true; tr.mu.Unlock() },
		GotConn:           func(httptrace.GotConnInfo) { tr.mu.Lock(); tr.gotConn = true; tr.mu.Unlock() },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if reqMeter != nil {
				reqMeter.stop() // the body is sent; the headers are awaited
			}
			tr.mu.Lock()
			defer tr.mu.Unlock()
			if info.Err != nil || tr.headerDone || tr.headerTimer != nil {
				return
			}
			tr.headerTimer = time.AfterFunc(w.t.ResponseHeader, func() {
				tr.mu.Lock()
				if tr.headerDone {
					tr.mu.Unlock()
					return
				}
				tr.header = true
				tr.mu.Unlock()
				cancel(stall("response headers", w.t.ResponseHeader, 0))
			})
		},
	})
	out := req.Clone(ctx)
	if reqMeter != nil {
		out.Body = &requestBody{rc: req.Body, m: reqMeter}
	}
	resp, err := w.base.RoundTrip(out)
	tr.mu.Lock()
	tr.headerDone = true
	if tr.headerTimer != nil {
		tr.headerTimer.Stop()
	}
	headerFired, tlsStuck, noConn := tr.header, tr.tlsStart && !tr.tlsDone, !tr.gotConn
	tr.mu.Unlock()
	if reqMeter != nil {
		reqMeter.stop()
	}
	if err == nil && headerFired {
		// The headers came as the timer fired: the request is canceled.
		resp.Body.Close()
		err = context.Cause(ctx)
	}
	if err != nil {
		cause := context.Cause(ctx)
		cancel(nil)
		if parent.Err() != nil {
			return nil, err
		}
		var se *StallError
		if errors.As(cause, &se) {
			return nil, se
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			switch {
			case tlsStuck:
				se = stall("TLS handshake", w.t.TLSHandshake, 0)
			case noConn:
				se = stall("connect", w.t.Connect, 0)
			default:
				return nil, err
			}
			se.Err = err
			return nil, se
		}
		return nil, err
	}
	body := &responseBody{rc: resp.Body, cancel: cancel}
	body.m = newMeter(w.t, func(moved int64) error {
		se := stall("response body", w.t.Stall, moved)
		cancel(se)
		return se
	})
	resp.Body = body
	return resp, nil
}

// requestBody meters the transport's reads of a request body: from the
// first read to the last, wall time counts (the transport reads as fast
// as the registry takes the bytes).
type requestBody struct {
	rc      io.ReadCloser
	m       *meter
	started bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	if !b.started {
		b.started = true
		b.m.resume()
	}
	if err := b.m.tripped(); err != nil {
		return 0, err
	}
	n, err := b.rc.Read(p)
	b.m.add(n)
	if err != nil {
		b.m.stop()
	}
	return n, err
}

func (b *requestBody) Close() error {
	b.m.stop()
	return b.rc.Close()
}

// responseBody meters a response body: only the time spent inside Read
// counts, and a stall cancels the request, which unblocks the read.
type responseBody struct {
	rc     io.ReadCloser
	m      *meter
	cancel context.CancelCauseFunc
	once   sync.Once
}

func (b *responseBody) Read(p []byte) (int, error) {
	if err := b.m.tripped(); err != nil {
		return 0, err
	}
	b.m.resume()
	n, err := b.rc.Read(p)
	b.m.add(n)
	b.m.pause()
	if serr := b.m.tripped(); serr != nil {
		// The read was cut by the stall, or ended a window below the
		// minimum.
		return n, serr
	}
	if err == io.EOF {
		b.m.stop()
	}
	return n, err
}

func (b *responseBody) Close() error {
	b.m.stop()
	err := b.rc.Close()
	b.once.Do(func() { b.cancel(nil) })
	return err
}

// meter decides whether a body stalls: the time it counts is cut into
// windows of Timeouts.Stall; a window that moved fewer than
// Stall×MinRate bytes (at least 1) trips it, which calls fire once.
type meter struct {
	window time.Duration
	min    int64
	fire   func(moved int64) error

	err error // fire's, once tripped (under mu)

	mu      sync.Mutex
	moved   int64         // bytes in the current window
	used    time.Duration // time counted in the current window before since
	since   time.Time     // counting since then (zero: paused)
	seq     uint64        // invalidates armed timers
	timer   *time.Timer
	trip    bool
	stopped bool
}

func newMeter(t Timeouts, fire func(moved int64) error) *meter {
	return &meter{window: t.Stall, min: max(1, int64(t.Stall.Seconds()*float64(t.MinRate))), fire: fire}
}

// resume starts counting time.
func (m *meter) resume() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped || m.trip || !m.since.IsZero() {
		return
	}
	m.since = time.Now()
	m.arm(m.window - m.used)
}

// arm (m.mu held) fires check after d.
func (m *meter) arm(d time.Duration) {
	m.seq++
	seq := m.seq
	if m.timer != nil {
		m.timer.Stop()
	}
	m.timer = time.AfterFunc(max(d, 0), func() { m.check(seq) })
}

// check runs when the counted time may have filled the window.
func (m *meter) check(seq uint64) {
	m.mu.Lock()
	if seq != m.seq || m.stopped || m.trip || m.since.IsZero() {
		m.mu.Unlock()
		return
	}
	now := time.Now()
	m.used += now.Sub(m.since)
	m.since = now
	if m.used < m.window {
		m.arm(m.window - m.used)
		m.mu.Unlock()
		return
	}
	m.judge()
	m.mu.Unlock()
}

// judge (m.mu held) ends a full window: trip, or start the next one.
// Tripping calls fire with m.mu held (fire must not call the meter).
func (m *meter) judge() {
	if m.moved < m.min {
		m.trip = true
		m.seq++
		m.err = m.fire(m.moved)
		return
	}
	m.moved, m.used = 0, 0
	if !m.since.IsZero() {
		m.arm(m.window)
	}
}

// pause stops counting time.
func (m *meter) pause() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.since.IsZero() || m.stopped || m.trip {
		return
	}
	m.used += time.Since(m.since)
	m.since = time.Time{}
	m.seq++
	if m.timer != nil {
		m.timer.Stop()
	}
	if m.used >= m.window {
		m.judge()
	}
}

func (m *meter) add(n int) {
	m.mu.Lock()
	m.moved += int64(n)
	m.mu.Unlock()
}

// stop ends the metering (the body is done).
func (m *meter) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	m.seq++
	if m.timer != nil {
		m.timer.Stop()
	}
}

// tripped returns the stall error once the meter tripped, else nil.
func (m *meter) tripped() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}
