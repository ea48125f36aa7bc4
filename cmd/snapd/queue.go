package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/pipeline"
)

type queueOptions struct {
	dir  string
	json bool
	ids  []string
}

func newQueueCommand(e *env) *cobra.Command {
	var o queueOptions
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Show and steer the resend queue of Git pushes",
		Long: `The resend queue holds one job per generation waiting to be pushed to the
Git remote, pushed in generation order per branch with capped exponential
backoff. A failure a person must fix (authentication refused, remote
diverged, push rejected) stops the queue in state needs-attention; fix the
cause, then run "snapd queue retry". These commands work on the queue
directory while the daemon runs.`,
	}
	cmd.PersistentFlags().StringVar(&o.dir, "dir", "", "resend queue directory (default STATE_DIR/push-queue)")
	cmd.PersistentFlags().MarkHidden("dir") // the old spelling; --state-dir is the one grammar
	cmd.PersistentPreRunE = func(c *cobra.Command, args []string) error { return o.resolveDir(e, c) }

	list := &cobra.Command{
		Use:   "list",
		Short: "Print the queue state and the pending pushes",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, args []string) error {
			return runQueueList(e, &o)
		},
	}
	list.Flags().BoolVar(&o.json, "json", false, usageJSON)

	retry := &cobra.Command{
		Use:   "retry",
		Short: "Clear a needs-attention stop and every backoff: push again now",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, args []string) error {
			return runQueueRetry(e, &o)
		},
	}

	drop := &cobra.Command{
		Use:   "drop BRANCH@GEN...",
		Short: "Remove pending pushes without pushing them",
		Long: `Remove the named jobs (as "snapd queue list" shows them, e.g. snapshots@123).
A dropped generation's commit still reaches the remote as the parent of any
later generation of its branch. Dropping the job a needs-attention stop is
about clears that stop.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("drop needs at least one BRANCH@GEN")}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.ids = args
			return runQueueDrop(e, &o)
		},
	}
	cmd.AddCommand(list, retry, drop)
	return cmd
}

// resolveDir sets o.dir from --dir (hidden alias) or the state directory,
// and checks it exists: these commands never create a queue.
func (o *queueOptions) resolveDir(e *env, cmd *cobra.Command) error {
	if f := cmd.Flags().Lookup("dir"); f == nil || !f.Changed {
		sd, err := e.existingStateDir(cmd)
		if err != nil {
			return err
		}
		o.dir = filepath.Join(sd, pipeline.QueueDir)
	}
	if _, err := os.Stat(o.dir); err != nil {
		return withHint(ioError{fmt.Errorf("no push queue: %w", err)},
			"the daemon keeps its queue in STATE_DIR/push-queue once git.remote is configured; pass its --state-dir")
	}
	return nil
}

func openQueue(o *queueOptions) (*queue.Queue, error) {
	q, err := queue.Open(o.dir, queue.Options{Shared: true})
	if err != nil {
		return nil, ioError{err}
	}
	return q, nil
}

func runQueueList(e *env, o *queueOptions) error {
	q, err := openQueue(o)
	if err != nil {
		return err
	}
	st, err := q.Status()
	if err != nil {
		return err
	}
	jobs, err := q.List()
	if err != nil {
		return err
	}
	if o.json {
		if jobs == nil {
			jobs = []queue.Job{}
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Status queue.Status `json:"status"`
			Jobs   []queue.Job  `json:"jobs"`
		}{st, jobs})
	}
	fmt.Fprintf(e.stdout, "state: %s\npending: %d\n", st.State, st.Pending)
	if !st.NextAttempt.IsZero() {
		fmt.Fprintf(e.stdout, "next attempt: %s (in %s)\n", st.NextAttempt.Format(time.RFC3339), st.NextAttempt.Sub(e.now()).Round(time.Second))
	}
	if st.Hold != nil {
		fmt.Fprintf(e.stdout, "stopped since %s by %s: %s\n", st.Hold.Since.Format(time.RFC3339), fmt.Sprintf("%s@%d", st.Hold.Branch, st.Hold.Gen), st.Hold.Kind)
		fmt.Fprintf(e.stdout, "hint: fix the cause, then run: snapd queue retry\n")
	}
	if st.LastError != "" {
		fmt.Fprintf(e.stdout, "last error: %s\n", st.LastError)
	}
	if len(jobs) == 0 {
		return nil
	}
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tCOMMIT\tTAG\tATTEMPTS\tNEXT ATTEMPT\tLAST ERROR")
	for _, j := range jobs {
		next := "-"
		if !j.NextAttempt.IsZero() {
			next = j.NextAttempt.Format(time.RFC3339)
		}
		tag := j.Tag
		if tag == "" {
			tag = "-"
		}
		attempts, lastErr := j.Attempts, j.LastError
		if h := st.Hold; h != nil && h.Branch == j.Branch && h.Gen == j.Gen {
			// The job that stopped the queue: the hold records its error;
			// the stopping attempt is in j only when it was a timeout.
			if lastErr != h.Error {
				attempts++
			}
			lastErr, next = h.Error, "stopped (snapd queue retry)"
		}
		if len(lastErr) > 80 {
			lastErr = lastErr[:77] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", j.ID(), jobCommit(j), tag, attempts, next, strings.ReplaceAll(lastErr, "\t", " "))
	}
	return tw.Flush()
}

func runQueueRetry(e *env, o *queueOptions) error {
	q, err := openQueue(o)
	if err != nil {
		return err
	}
	if err := q.Retry(); err != nil {
		return err
	}
	st, err := q.Status()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "snapd: queue: retry requested; %d pending\n", st.Pending)
	return nil
}

func runQueueDrop(e *env, o *queueOptions) error {
	type id struct {
		branch string
		gen    uint64
	}
	var ids []id
	for _, s := range o.ids {
		b, g, err := queue.ParseJobID(s)
		if err != nil {
			return usageError{err}
		}
		ids = append(ids, id{b, g})
	}
	q, err := openQueue(o)
	if err != nil {
		return err
	}
	for _, x := range ids {
		if err := q.Drop(x.branch, x.gen); err != nil {
			if errors.Is(err, queue.ErrNotFound) {
				return withHint(err, "run snapd queue list to see the pending jobs")
			}
			return err
		}
		fmt.Fprintf(e.stderr, "snapd: queue: dropped %s@%d\n", x.branch, x.gen)
	}
	return nil
}
