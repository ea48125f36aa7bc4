package gitops

import (
	"bytes"
	"strconv"
	"strings"
	"time"
)

// Push phases reported through PushRequest.Progress, in order.
const (
	PhaseListRemote = "ls-remote" // git ls-remote: what the remote has
	PhaseCount      = "rev-list"  // git rev-list --disk-usage: what to send
	PhasePush       = "push"      // git push: sending objects, then the remote's update
)

// PushProgress is the state of a Push in progress, as GitPusher reports
// it to PushRequest.Progress: the phase (one git child each), the kill
// limit of that child (Limit: the size-scaled timeout for the push, the
// base timeout for the others; Stall: the no-progress watchdog), the
// estimated bytes to send (SendBytes, from git rev-list --disk-usage; 0
// when unknown) and, while git push writes its pack, what its "Writing
// objects" progress line says: objects written of the total, and the
// bytes written (as git rounds them: two decimals of KiB/MiB/GiB).
type PushProgress struct {
	Phase        string
	Limit        time.Duration
	Stall        time.Duration
	SendBytes    int64
	ObjectsSent  int64
	ObjectsTotal int64
	BytesSent    int64
}

// gitProgress is one state of git's "Writing objects" line.
type gitProgress struct {
	objects, total, bytes int64
}

// progressReporter sends a Push's states to PushRequest.Progress.
type progressReporter struct {
	fn  func(PushProgress)
	cur PushProgress
}

// phase reports the start of a phase whose git child may run for limit.
func (r *progressReporter) phase(name string, limit, stall time.Duration) {
	if r.fn == nil {
		return
	}
	r.cur.Phase, r.cur.Limit, r.cur.Stall = name, limit, stall
	r.fn(r.cur)
}

// git reports a new state of the Writing objects line.
func (r *progressReporter) git(g gitProgress) {
	if r.fn == nil {
		return
	}
	r.cur.ObjectsSent, r.cur.ObjectsTotal, r.cur.BytesSent = g.objects, g.total, g.bytes
	r.fn(r.cur)
}

// observer returns the callback for runObserved (nil when nobody listens).
func (r *progressReporter) observer() func(gitProgress) {
	if r.fn == nil {
		return nil
	}
	return r.git
}

// progress returns the last state of the "Writing objects" line in the
// kept stderr tail, e.g. "Writing objects:  45% (9/20), 1.20 MiB | 2.00
// MiB/s" (git redraws it after '\r'); ok is false when there is none.
func (w *progressWriter) progress() (gitProgress, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return parseWriting(w.tail)
}

// parseWriting parses the last complete-looking "Writing objects:" state
// in b.
func parseWriting(b []byte) (gitProgress, bool) {
	const key = "Writing objects:"
	i := bytes.LastIndex(b, []byte(key))
	if i < 0 {
		return gitProgress{}, false
	}
	s := string(b[i+len(key):])
	if j := strings.IndexAny(s, "\r\n"); j >= 0 {
		s = s[:j]
	}
	// "  45% (9/20), 1.20 MiB | 2.00 MiB/s" or "100% (20/20), 3 bytes | ..., done."
	open, close := strings.IndexByte(s, '('), strings.IndexByte(s, ')')
	if open < 0 || close < open {
		return gitProgress{}, false
	}
	n, total, ok := strings.Cut(s[open+1:close], "/")
	if !ok {
		return gitProgress{}, false
	}
	var g gitProgress
	var err1, err2 error
	g.objects, err1 = strconv.ParseInt(n, 10, 64)
	g.total, err2 = strconv.ParseInt(total, 10, 64)
	if err1 != nil || err2 != nil || g.objects < 0 || g.total < g.objects {
		return gitProgress{}, false
	}
	rest := strings.TrimPrefix(s[close+1:], ",")
	if k := strings.IndexByte(rest, '|'); k >= 0 {
		rest = rest[:k]
	}
	rest = strings.TrimSuffix(strings.TrimSpace(rest), ", done.")
	if f := strings.Fields(rest); len(f) == 2 {
		mult := map[string]float64{"bytes": 1, "byte": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[f[1]]
		if v, err := strconv.ParseFloat(f[0], 64); err == nil && mult > 0 && v >= 0 && v*mult < 1<<62 {
			g.bytes = int64(v * mult)
		}
	}
	return g, true
}
