package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/configs"
	"github.com/snapd-ml/snapd/internal/gittest"
)

// metricsURL waits for the daemon's "metrics url=..." log line.
func metricsURL(t *testing.T, d *daemon) string {
	t.Helper()
	re := regexp.MustCompile(`url=(http://127\.0\.0\.1:[0-9]+)/metrics`)
	var base string
	waitFor(t, "the metrics listener", func() (bool, string) {
		m := re.FindStringSubmatch(d.stderr.String())
		if m != nil {
			base = m[1]
		}
		return m != nil, d.stderr.String()
	})
	return base
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// sample returns the value of the series `name{labels}` (labels exactly as
// exposed, "" for none) in a text exposition; ok false when absent.
func sample(text, series string) (float64, bool) {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// promtoolCheck runs `promtool check metrics` (Debian package prometheus)
// on the exposition: it must be clean (no lint problems either).
func promtoolCheck(t *testing.T, text string) {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (Debian package prometheus; scripts/test.sh installs it): lint skipped")
		return
	}
	cmd := exec.Command(p, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || strings.TrimSpace(out.String()) != "" {
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
}

// TestRunMetricsAndHealth: every counter is exposed at zero from the start
// and snapd_build_info is there; after two generations are pushed to a
// real Git remote the push counters, last-push timestamp and latency
// histograms say so, /healthz is ok, the log has stage and push lines at
// info; promtool finds nothing to complain about. Then the remote goes
// down (the queue retries: with stuck_after exceeded /healthz turns 503)
// and asks for credentials (needs attention: 503, gauge 1).
func TestRunMetricsAndHealth(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%smetrics: {stuck_after: 1ms}\n", remote.URL, fastGit))
	d := startDaemon(t, "--state-dir", state, "--config", cfg, "--metrics-addr", "127.0.0.1:0", "--principal", "ops@test")
	base := metricsURL(t, d)

	code, text := httpGet(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, s := range []string{`snapd_pushes_total{result="done"}`, `snapd_pushes_total{result="failed"}`, `snapd_requests_total{result="done"}`,
		`snapd_requests_total{result="failed"}`, `snapd_failures_total{stage="git"}`, `snapd_push_pending`, `snapd_push_needs_attention`,
		`snapd_last_push_success_timestamp_seconds`, `snapd_push_duration_seconds_count`, `snapd_request_to_pushed_seconds_count`, `snapd_snapshots_total`} {
		if v, ok := sample(text, s); !ok || v != 0 {
			t.Errorf("at start %s = %v (present %v), want 0", s, v, ok)
		}
	}
	if !regexp.MustCompile(`(?m)^snapd_build_info\{goversion="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`).MatchString(text) {
		t.Errorf("no snapd_build_info:\n%s", text)
	}
	promtoolCheck(t, text)
	if code, body := httpGet(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz at start: %d %s", code, body)
	}

	requestTiny(t, state, 1)
	requestTiny(t, state, 2)
	waitFor(t, "generation 2 on the remote", pushedAll(t, remote, state, 2))
	_, text = httpGet(t, base+"/metrics")
	for s, want := range map[string]float64{`snapd_pushes_total{result="done"}`: 2, `snapd_pushes_total{result="failed"}`: 0,
		`snapd_push_pending`: 0, `snapd_push_needs_attention`: 0, `snapd_request_to_pushed_seconds_count`: 2, `snapd_push_duration_seconds_count`: 2,
		`snapd_requests_total{result="done"}`: 2} {
		if v, ok := sample(text, s); !ok || v != want {
			t.Errorf("after 2 pushes %s = %v (present %v), want %v", s, v, ok, want)
		}
	}
	if v, _ := sample(text, "snapd_last_push_success_timestamp_seconds"); v < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("last push timestamp %v", v)
	}
	promtoolCheck(t, text)
	// The daemon's allowed_signers checks the pushed commits and tags.
	signers := filepath.Join(state, "keys", "allowed_signers")
	for _, args := range [][]string{{"verify-commit", "refs/heads/snapshots"}, {"verify-tag", "gen-000002"}} {
		out, err := gittest.GitRun(remote.Dir, append([]string{"-c", "gpg.ssh.allowedSignersFile=" + signers}, args...)...)
		if err != nil || !strings.Contains(out, `Good "git" signature for ops@test`) {
			t.Fatalf("git %s with the daemon's allowed_signers: %v\n%s", args[0], err, out)
		}
	}
	if code, body := httpGet(t, base+"/healthz"); code != 200 || !strings.HasPrefix(body, "ok gen=2") {
		t.Fatalf("/healthz after pushes: %d %s", code, body)
	}
	logs := d.stderr.String()
	for _, want := range []string{`level=INFO msg="stage started" stage=prepare gen=1`, `level=INFO msg="stage finished" stage=encode gen=2 duration=`,
		`level=INFO msg="stage finished" stage=git gen=2`, `level=INFO msg=pushed branch=snapshots`, `request_to_pushed=`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}

	// Down: the push of gen 3 is retried; its job is older than stuck_after.
	remote.SetMode(gittest.Down)
	requestTiny(t, state, 3)
	waitFor(t, "a failed push of gen 3", func() (bool, string) {
		st, detail := queueState(t, state)
		return st != nil && st.Queue != nil && st.Queue.State == "retrying", detail
	})
	waitFor(t, "/healthz: stuck", func() (bool, string) {
		code, body := httpGet(t, base+"/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "push queue stuck"), fmt.Sprintf("%d %s", code, body)
	})
	// Credentials required: needs attention.
	remote.SetMode(gittest.Up)
	remote.RequireToken("s3cret")
	waitFor(t, "/healthz: needs attention", func() (bool, string) {
		code, body := httpGet(t, base+"/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "needs attention"), fmt.Sprintf("%d %s", code, body)
	})
	_, text = httpGet(t, base+"/metrics")
	if v, _ := sample(text, "snapd_push_needs_attention"); v != 1 {
		t.Errorf("needs_attention %v", v)
	}
	if v, _ := sample(text, "snapd_push_pending"); v != 1 {
		t.Errorf("pending %v", v)
	}
	if v, _ := sample(text, `snapd_pushes_total{result="failed"}`); v < 2 {
		t.Errorf("failed pushes %v", v)
	}
	promtoolCheck(t, text)
}

// TestLogDurations: durations are human-readable in text logs and seconds
// in JSON logs.
func TestLogDurations(t *testing.T) {
	for format, want := range map[string]string{"text": "duration=1.5s", "json": `"duration":1.5`} {
		var b bytes.Buffer
		c := configs.Default()
		c.Log.Format = format
		newLogger(&b, c).Info("stage finished", "duration", 1500*time.Millisecond)
		if !strings.Contains(b.String(), want) {
			t.Errorf("%s: %q lacks %q", format, b.String(), want)
		}
	}
}
