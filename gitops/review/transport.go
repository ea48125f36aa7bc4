package review

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/snapd-ml/snapd/internal/backoff"
)

// RetryPolicy says how rate limits and transient failures are waited out.
// The zero value uses the defaults below.
type RetryPolicy struct {
	// MaxRetries bounds the retries of one request (default 5).
	MaxRetries int
	// MaxWait is the longest single wait honored (default 15 minutes);
	// when GitHub asks for more, the request fails with the rate-limit
	// response instead of sleeping.
	MaxWait time.Duration
	// SecondaryDelay is the first wait after a secondary rate limit that
	// names no time (default 60 s, GitHub's advice); it doubles per retry.
	SecondaryDelay time.Duration
	// ServerDelay is the first wait after a 502/503/504 or a network error
	// of an idempotent request (default 1 s); it doubles per retry.
	ServerDelay time.Duration
	// Now and Sleep are the clock (tests inject both). Sleep must return
	// early with ctx.Err() when ctx ends.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxRetries <= 0 {
		p.MaxRetries = 5
	}
	if p.MaxWait <= 0 {
		p.MaxWait = 15 * time.Minute
	}
	if p.SecondaryDelay <= 0 {
		p.SecondaryDelay = time.Minute
	}
	if p.ServerDelay <= 0 {
		p.ServerDelay = time.Second
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Sleep == nil {
		p.Sleep = backoff.Sleep
	}
	return p
}

// Timeouts bound the network side of every API request. Zero fields take
// the defaults.
type Timeouts struct {
	// Dial bounds a TCP connect (default 10 s); TLSHandshake the TLS
	// handshake (10 s); ResponseHeader the wait for a response's headers
	// after the request is written (60 s).
	Dial, TLSHandshake, ResponseHeader time.Duration
	// Attempt bounds one attempt from start to the end of reading its
	// body (default 10 minutes: a 100 MB contents download). Rate-limit
	// waits between attempts are bounded by RetryPolicy.MaxWait instead.
	Attempt time.Duration
}

func (t Timeouts) withDefaults() Timeouts {
	if t.Dial <= 0 {
		t.Dial = 10 * time.Second
	}
	if t.TLSHandshake <= 0 {
		t.TLSHandshake = 10 * time.Second
	}
	if t.ResponseHeader <= 0 {
		t.ResponseHeader = time.Minute
	}
	if t.Attempt <= 0 {
		t.Attempt = 10 * time.Minute
	}
	return t
}

// transport returns an HTTP transport with t's limits (proxy settings
// from the environment, as http.DefaultTransport).
func (t Timeouts) transport() *http.Transport {
	d := &net.Dialer{Timeout: t.Dial, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   t.TLSHandshake,
		ResponseHeaderTimeout: t.ResponseHeader,
		ExpectContinueTimeout: time.Second,
	}
}

// attemptTimeout bounds one round trip, body included: the deadline ends
// when the body is closed or the time is up.
type attemptTimeout struct {
	base http.RoundTripper
	d    time.Duration
}

func (a attemptTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), a.d)
	resp, err := a.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		if ctx.Err() == context.DeadlineExceeded && req.Context().Err() == nil {
			return nil, fmt.Errorf("github: %s %s: no complete answer within %s: %w", req.Method, req.URL.Path, a.d, err)
		}
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// Invalidator is implemented by a TokenSource that caches credentials:
// after a 401 the transport calls Invalidate with the Authorization value
// GitHub refused, then retries the request once with a fresh one.
type Invalidator interface {
	Invalidate(authorization string)
}

// transport authorizes requests to the API host and waits out rate limits.
// It sits below go-github's client, so go-github only sees the final
// response of a request.
//
// go-github refuses requests on its own (without calling the server) while
// the last response said X-RateLimit-Remaining: 0 until X-RateLimit-Reset,
// judged by the real clock. This transport does that waiting itself (with
// the injectable clock), so it removes X-RateLimit-Reset from successful
// responses whose Remaining is 0 before go-github sees them.
type transport struct {
	base      http.RoundTripper
	host      string // requests to other hosts get no Authorization
	authorize func(ctx context.Context) (string, error)
	// invalidate drops cached credentials after a 401 (nil: nothing is
	// cached, a retry could not help).
	invalidate func(authorization string)
	policy     RetryPolicy
	log        *slog.Logger

	mu           sync.Mutex
	blockedUntil time.Time // primary limit exhausted until then
}

// maxErrorBody bounds how much of an error response is read to classify it.
const maxErrorBody = 64 << 10

// errGiveUp ends the retries of a request whose last response goes back
// to go-github as it is (out of retries, or a wait beyond MaxWait).
var errGiveUp = errors.New("github: giving up")

// RoundTrip sends req, waiting out rate limits and transient failures
// through backoff.Retry: each attempt (attempt counts round trips from 0)
// either ends the request — a response, a final error, or errGiveUp with
// the last response kept — or asks for another round trip after the wait
// it chose (backoff.RetryAfter: GitHub's Retry-After, a rate limit's
// reset, or retryDelay). A 401 with cached credentials is retried once at
// once, within the same attempt.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	p := t.policy
	reauthorized := false
	attempt := -1
	var final *http.Response // the response to return
	retrying := false        // the last attempt asked for another
	once := func() error {
		retrying = false
		for {
			attempt++
			if err := t.waitPrimary(ctx); err != nil {
				return err
			}
			r := req.Clone(ctx)
			if attempt > 0 && req.Body != nil && req.Body != http.NoBody {
				if req.GetBody == nil {
					return fmt.Errorf("github: %s %s: cannot resend the request body", req.Method, req.URL.Path)
				}
				b, err := req.GetBody()
				if err != nil {
					return err
				}
				r.Body = b
			}
			auth := ""
			if t.authorize != nil && r.URL.Host == t.host {
				v, err := t.authorize(ctx)
				if err != nil {
					return err
				}
				auth = v
				r.Header.Set("Authorization", v)
			}
			start := p.Now()
			resp, err := t.base.RoundTrip(r)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if !idempotent(req.Method) || attempt >= p.MaxRetries {
					return err
				}
				d := retryDelay(p.ServerDelay, attempt)
				t.log.Debug("github request failed, retrying", "method", req.Method, "path", req.URL.Path, "attempt", attempt+1, "wait", d, "err", err.Error())
				retrying = true
				return backoff.RetryAfter(err, d)
			}
			t.log.Debug("github request", "method", req.Method, "path", req.URL.Path, "status", resp.StatusCode, "attempt", attempt+1, "elapsed", p.Now().Sub(start))
			if resp.StatusCode == http.StatusUnauthorized && auth != "" && t.invalidate != nil && !reauthorized {
				// A cached token GitHub no longer accepts (revoked, or the
				// installation changed): drop it and try once with a new one.
				reauthorized = true
				t.invalidate(auth)
				t.log.Warn("github: credentials refused (401); dropped the cached token, retrying once with a new one", "method", req.Method, "path", req.URL.Path)
				io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
				resp.Body.Close()
				continue
			}
			wait, reason, err := t.classify(resp, attempt, req.Method)
			if err != nil {
				return err
			}
			if reason == "" {
				t.notePrimary(resp)
				final = resp
				return nil
			}
			if attempt >= p.MaxRetries || wait > p.MaxWait {
				t.log.Warn("github: giving up", "method", req.Method, "path", req.URL.Path, "status", resp.StatusCode, "reason", reason, "attempts", attempt+1, "wait", wait)
				final = resp
				return errGiveUp
			}
			t.log.Warn("github: waiting before retry", "method", req.Method, "path", req.URL.Path, "status", resp.StatusCode, "reason", reason, "wait", wait, "attempt", attempt+1)
			io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
			resp.Body.Close()
			retrying = true
			return backoff.RetryAfter(fmt.Errorf("github: %s %s: %s", req.Method, req.URL.Path, reason), wait)
		}
	}
	// Only the attempt's own RetryAfter retries; every other error is
	// final. The waits are the attempt's, slept on the policy's clock.
	_, err := backoff.Retry(ctx, backoff.Policy{Retryable: func(error) bool { return false }, Sleep: p.Sleep}, once)
	switch {
	case err == nil, errors.Is(err, errGiveUp):
		return final, nil
	case retrying && ctx.Err() != nil:
		// The context ended before the wait: as if during it.
		return nil, ctx.Err()
	}
	return nil, err
}

func idempotent(m string) bool { return m == http.MethodGet || m == http.MethodHead }

// maxDoublings caps the GitHub transport's backoff at base·2^10.
const maxDoublings = 10

// retryDelay is the wait before retry attempt+1 (attempt counts from 0):
// base doubled per attempt, at most 2^maxDoublings times, no jitter (the
// waits are GitHub's to ask for; MaxWait bounds them).
func retryDelay(base time.Duration, attempt int) time.Duration {
	return backoff.Policy{Base: base, Max: base << maxDoublings}.Delay(attempt + 1)
}

// classify decides whether resp is a rate limit or transient failure and
// how long to wait. It may replace resp.Body with a re-readable copy.
func (t *transport) classify(resp *http.Response, attempt int, method string) (time.Duration, string, error) {
	p := t.policy
	switch resp.StatusCode {
	case http.StatusForbidden, http.StatusTooManyRequests:
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if idempotent(method) {
			return retryDelay(p.ServerDelay, attempt), "server error", nil
		}
		return 0, "", nil
	default:
		return 0, "", nil
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if s, err := strconv.ParseInt(strings.TrimSpace(ra), 10, 64); err == nil && s >= 0 {
			return time.Duration(s) * time.Second, "Retry-After", nil
		}
		if when, err := http.ParseTime(ra); err == nil {
			return max(0, when.Sub(p.Now())), "Retry-After", nil
		}
	}
	if resp.Header.Get("X-RateLimit-Remaining") == "0" {
		if reset, ok := parseReset(resp.Header); ok {
			return max(0, reset.Sub(p.Now())) + time.Second, "X-RateLimit-Reset", nil
		}
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return retryDelay(p.SecondaryDelay, attempt), "secondary rate limit", nil
	}
	// A 403 is a rate limit only when its message says so; otherwise it is
	// a permission error and returned as it is.
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	if err != nil {
		return 0, "", fmt.Errorf("github: read %d response: %w", resp.StatusCode, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if bytes.Contains(bytes.ToLower(body), []byte("rate limit")) {
		return retryDelay(p.SecondaryDelay, attempt), "secondary rate limit", nil
	}
	return 0, "", nil
}

func parseReset(h http.Header) (time.Time, bool) {
	v, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err != nil || v <= 0 {
		return time.Time{}, false
	}
	return time.Unix(v, 0), true
}

// notePrimary remembers an exhausted primary limit from a successful
// response and hides its reset time from go-github (see transport).
func (t *transport) notePrimary(resp *http.Response) {
	if resp.Header.Get("X-RateLimit-Remaining") != "0" {
		return
	}
	reset, ok := parseReset(resp.Header)
	if !ok {
		return
	}
	t.mu.Lock()
	if reset.After(t.blockedUntil) {
		t.blockedUntil = reset
	}
	t.mu.Unlock()
	resp.Header = resp.Header.Clone()
	resp.Header.Del("X-RateLimit-Reset")
}

// errRateLimitTooLong is returned when the primary limit resets later than
// RetryPolicy.MaxWait.
var errRateLimitTooLong = errors.New("github: API rate limit exhausted")

func (t *transport) waitPrimary(ctx context.Context) error {
	t.mu.Lock()
	until := t.blockedUntil
	t.mu.Unlock()
	if until.IsZero() {
		return nil
	}
	d := until.Sub(t.policy.Now())
	if d <= 0 {
		return nil
	}
	d += time.Second
	if d > t.policy.MaxWait {
		return fmt.Errorf("%w until %s (more than the %s this run waits)", errRateLimitTooLong, until.UTC().Format(time.RFC3339), t.policy.MaxWait)
	}
	t.log.Warn("github: primary rate limit exhausted, waiting for reset", "wait", d)
	if err := t.policy.Sleep(ctx, d); err != nil {
		return err
	}
	t.mu.Lock()
	if !t.blockedUntil.After(until) {
		t.blockedUntil = time.Time{}
	}
	t.mu.Unlock()
	return nil
}
