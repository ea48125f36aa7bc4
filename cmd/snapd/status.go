package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/progress"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/wal"
)

type statusOptions struct {
	stateDir string
	json     bool
}

func newStatusCommand(e *env) *cobra.Command {
	var o statusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the daemon's chain head, ring, backlog, push queue and last error",
		Long: `status reads the state directory's files (it works whether or not the
daemon runs and changes nothing): the chain head (last generation and its
root values), the generation and stage in progress while the daemon runs,
the generations in the ring, requests not yet handled (backlog), failed
requests with their error (one asked for again since is only counted: the
newest request decides, as for snapd wait), the resend queue and, while the daemon pushes,
the push in progress (generation, commit, attempt, since when, the phase —
publish, ls-remote, rev-list or push — git's objects and bytes written of
the estimated size, and when the timeout or the stall watchdog would kill
it), the OCI registry upload of the
skeleton layout (bytes uploaded, skipped because the registry had them,
pending) and the last error.

Exit status (with --json too; the JSON is the same): 0 when the state is
readable and needs nobody; 1 when it needs a person: a damaged WAL
cursor, a push-queue job file that does not parse (status names the
file, says what is wrong with it and how to fix it; the queue shows as
CORRUPT, never as absent), a push queue stopped as needs-attention
(fix the cause, then snapd queue retry), a ranks committer whose last
round failed or whose pending generation is missing ranks past
ranks.timeout (the committer node of a sharded job), or a newest
generation that failed (not asked for again, and no later generation
snapshotted since); 2 when
the state directory cannot be read.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.stateDir, err = e.existingStateDir(cmd); err != nil {
				return err
			}
			return runStatus(e, &o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, usageJSON)
	return cmd
}

func runStatus(e *env, o *statusOptions) error {
	st, err := pipeline.ReadStatus(o.stateDir)
	if err != nil {
		return withHint(ioError{err}, "is --state-dir the daemon's state directory?")
	}
	// A damaged WAL cursor is a warning in the output and the exit status.
	cerr := wal.CheckCursor(stateWALDir(o.stateDir))
	if cerr != nil {
		st.Warnings = append(st.Warnings, cerr.Error())
	}
	if o.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
		return statusDamage(cerr, st)
	}
	writeStatus(e.stdout, st, e.now())
	return statusDamage(cerr, st)
}

// statusDamage is status's error when the state needs a person: a
// damaged WAL cursor, push-queue job files that do not parse, a push
// queue stopped as needs-attention, or a newest generation that failed
// (exit 1 with a hint; the output above says which and why).
func statusDamage(cursorErr error, st *pipeline.Status) error {
	if err := walCursorDamage(cursorErr); err != nil {
		return err
	}
	if q := st.Queue; q != nil && len(q.Corrupt) > 0 {
		return withHint(fmt.Errorf("push queue: %d job file(s) do not parse; first: %s", len(q.Corrupt), q.Corrupt[0].Error), queueCorruptHint)
	}
	if q := st.Queue; q != nil && q.State == queue.StateNeedsAttention {
		msg := "push queue needs attention"
		if h := q.Hold; h != nil {
			msg = fmt.Sprintf("push queue needs attention: gen %d: %s: %s", h.Gen, h.Kind, h.Error)
		}
		return withHint(errors.New(msg), "fix the cause, then resume at once with: snapd queue retry")
	}
	if rs := st.Ranks; rs != nil && rs.LastError != "" {
		return withHint(fmt.Errorf("ranks committer needs attention: %s", rs.LastError),
			"the committer retries by itself with backoff; fix the registry or Git remote it names (snapd ranks status)")
	}
	if rs := st.Ranks; rs != nil && rs.TimedOut {
		return withHint(fmt.Errorf("ranks committer needs attention: generation %d is missing ranks %v past ranks.timeout", rs.Pending, rs.Missing),
			"check the nodes of the missing ranks (snapd wal list there), or set ranks.on_timeout: skip (snapd ranks status)")
	}
	if f := lastFailed(st); f != nil {
		return withHint(fmt.Errorf("the newest generation failed: gen %d (%s): %s", f.Gen, f.Source, f.Message),
			"fix the cause and request the generation again (snapd request-snapshot), or wait for the next one")
	}
	return nil
}

// lastFailed returns the failed request of the newest generation that
// failed when no generation was snapshotted after it and it was not
// asked for again since (the last generation failed), else nil.
func lastFailed(st *pipeline.Status) *pipeline.FailedRequest {
	var f *pipeline.FailedRequest
	for i := range st.Failed {
		if c := &st.Failed[i]; f == nil || c.Gen >= f.Gen {
			f = c
		}
	}
	if f == nil || f.Retried || st.Chain != nil && st.Chain.Gen >= f.Gen {
		return nil
	}
	return f
}

// queueCorruptHint says how to fix a push-queue job file that does not
// parse.
const queueCorruptHint = "stop the daemon, then repair the job file or move it out of the queue directory " +
	"(a removed job's commit stays in the local repository and reaches the remote as the parent of the next generation pushed on its branch); " +
	"start the daemon again and check with: snapd queue list"

func writeStatus(w io.Writer, st *pipeline.Status, now time.Time) {
	run := "not running"
	if st.Running {
		run = fmt.Sprintf("running (pid %d)", st.PID)
	}
	fmt.Fprintf(w, "state dir:   %s\ndaemon:      %s\n", st.StateDir, run)
	for _, a := range st.InProgress {
		fmt.Fprintf(w, "in progress: gen %s %s, for %s", a.GenText, a.Stage, now.Sub(a.Started).Round(100*time.Millisecond))
		if a.Total > 0 {
			fmt.Fprintf(w, " (about %s to write)", progress.Bytes(a.Total))
		}
		fmt.Fprintln(w)
	}
	if c := st.Chain; c.Gen == 0 {
		fmt.Fprintf(w, "chain head:  none (no generation snapshotted yet)\n")
	} else {
		fmt.Fprintf(w, "chain head:  gen %s  ts %s  build %s  (%d generations chained here)\n", c.GenText, c.TS, c.Build, c.Generations)
		fmt.Fprintf(w, "  sha256_all  %s\n  merkle_this %s\n  merkle_prev %s", c.SHA256All, c.MerkleThis, c.MerklePrev)
		if c.PrevGen != 0 {
			fmt.Fprintf(w, " (gen %d)", c.PrevGen)
		}
		fmt.Fprintln(w)
		if len(c.Meta) > 0 {
			fmt.Fprintf(w, "  meta        %s\n", c.Meta)
		}
		if r := c.Resume; r != nil {
			fmt.Fprintf(w, "  resumed     from gen %d at gen %d, %s\n", r.From, r.AtGen, abandonedRange(r))
		}
		if r := c.Resuming; r != nil {
			fmt.Fprintf(w, "  resuming    from gen %d (declared, no generation done since): the next generation chains to gen %d, %s\n", r.From, r.From, abandonedRange(r))
		}
	}
	if n := len(st.Ring); n == 0 {
		fmt.Fprintf(w, "ring:        empty\n")
	} else {
		var total int64
		for _, r := range st.Ring {
			total += r.Bytes
		}
		fmt.Fprintf(w, "ring:        %d generations (%d..%d), %d bytes\n", n, st.Ring[0].Gen, st.Ring[n-1].Gen, total)
	}
	retried := 0
	for _, f := range st.Failed {
		if f.Retried {
			retried++
		}
	}
	fmt.Fprintf(w, "requests:    %d pending (backlog), %d done, %d failed", st.Backlog, st.Done, len(st.Failed))
	if retried > 0 {
		fmt.Fprintf(w, " (%d of them requested again since: snapd wal list)", retried)
	}
	fmt.Fprintln(w)
	for _, f := range st.Failed {
		if !f.Retried {
			fmt.Fprintf(w, "  failed gen %d (%s): %s\n", f.Gen, f.Source, f.Message)
		}
	}
	if q := st.Queue; q == nil {
		fmt.Fprintf(w, "push queue:  none (no git remote configured)\n")
	} else if q.State == queue.StateCorrupt {
		fmt.Fprintf(w, "push queue:  CORRUPT: %d job file(s) do not parse; %d other job(s) pending\n", len(q.Corrupt), q.Pending)
		for _, c := range q.Corrupt {
			fmt.Fprintf(w, "  corrupt job: %s: %s\n", c.File, c.Error)
		}
		fmt.Fprintf(w, "  fix:       %s\n", queueCorruptHint)
		if p := q.Pushing; p != nil {
			writePushing(w, p, now)
		}
	} else {
		fmt.Fprintf(w, "push queue:  %s, %d pending", q.State, q.Pending)
		if !q.NextAttempt.IsZero() {
			fmt.Fprintf(w, ", next attempt in %s", q.NextAttempt.Sub(now).Round(time.Second))
		}
		fmt.Fprintln(w)
		if q.LastError != "" {
			fmt.Fprintf(w, "  last push error: %s\n", q.LastError)
		}
		if p := q.Pushing; p != nil {
			writePushing(w, p, now)
		}
	}
	if o := st.OCI; o != nil {
		writeOCIStatus(w, o)
	}
	if pr := st.PullRequest; pr != nil {
		switch p := pr.Published; {
		case p != nil && p.Skipped != "":
			fmt.Fprintf(w, "pull request: skipped for %.12s: %s\n", p.Commit, p.Skipped)
		case p != nil:
			fmt.Fprintf(w, "pull request: #%d %s, review of %.12s: %s (verdict %s)\n", p.Number, p.URL, p.Commit, p.Event, p.Verdict)
		default:
			fmt.Fprintf(w, "pull request: none posted yet\n")
		}
		if pr.Pushed != nil && (pr.Published == nil || pr.Published.Commit != pr.Pushed.Commit) {
			fmt.Fprintf(w, "  pending review of %.12s (%d attempts)\n", pr.Pushed.Commit, pr.Attempts)
		}
		if pr.LastError != "" {
			fmt.Fprintf(w, "  last pull-request error: %s\n", pr.LastError)
		}
	}
	if rs := st.Ranks; rs != nil {
		fmt.Fprintf(w, "ranks:       committer of a sharded job\n")
		writeRanksStatus(w, rs, "  ")
	}
	if le := st.LastError; le != nil {
		fmt.Fprintf(w, "last error:  %s gen %d [%s]: %s\n", le.Time.Format(time.RFC3339), le.Gen, le.Stage, le.Message)
	}
	for _, wn := range st.Warnings {
		fmt.Fprintf(w, "warning:     %s\n", wn)
	}
}

// abandonedRange says which generations a resume abandoned.
func abandonedRange(r *pipeline.ResumeState) string {
	switch {
	case r.AbandonedLast <= r.From:
		return "none abandoned"
	case r.AbandonedLast == r.From+1:
		return fmt.Sprintf("abandoned gen %d", r.AbandonedLast)
	}
	return fmt.Sprintf("abandoned gens %d..%d", r.From+1, r.AbandonedLast)
}

// writePushing prints the push attempt in progress: generation, phase,
// since when, git's progress and the limits that would kill it.
func writePushing(w io.Writer, p *queue.Pushing, now time.Time) {
	commit := p.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit == "" {
		commit = "not committed yet"
	}
	fmt.Fprintf(w, "  pushing:   gen %06d (commit %s, attempt %d) since %s (%s); phase %s for %s\n",
		p.Gen, commit, p.Attempt, p.Since.Local().Format(time.TimeOnly), now.Sub(p.Since).Round(100*time.Millisecond),
		p.Phase, now.Sub(p.PhaseSince).Round(100*time.Millisecond))
	if p.ObjectsTotal > 0 || p.SendBytes > 0 {
		fmt.Fprintf(w, "    sent:    ")
		if p.ObjectsTotal > 0 {
			fmt.Fprintf(w, "%d of %d objects, %s", p.ObjectsSent, p.ObjectsTotal, progress.Bytes(p.BytesSent))
		} else {
			fmt.Fprintf(w, "nothing reported yet")
		}
		if p.SendBytes > 0 {
			fmt.Fprintf(w, " (about %s to send)", progress.Bytes(p.SendBytes))
		}
		fmt.Fprintln(w)
	}
	if !p.Deadline.IsZero() {
		fmt.Fprintf(w, "    limits:  killed at %s (timeout %s, %s left)", p.Deadline.Local().Format(time.TimeOnly),
			time.Duration(p.TimeoutSeconds*float64(time.Second)).Round(time.Second), p.Deadline.Sub(now).Round(time.Second))
		if p.StallSeconds > 0 {
			fmt.Fprintf(w, " or after %s without progress", time.Duration(p.StallSeconds*float64(time.Second)).Round(time.Second))
		}
		fmt.Fprintln(w)
	}
}
