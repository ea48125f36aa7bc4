package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/configs"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/wal"
)

type waitOptions struct {
	stateDir string
	branch   string // the generations branch (git.branch), for --pushed
	gen      uint64
	pushed   bool
	once     bool // print the current state and exit 0 whatever it is
	timeout  time.Duration
	json     bool
	// interval is the polling period without file notifications;
	// notifiedInterval the safety-net period with them.
	interval, notifiedInterval time.Duration
}

// waitResult is what `snapd wait --json` prints.
type waitResult struct {
	Gen     uint64 `json:"gen"`
	State   string `json:"state"` // done, pushed, failed, pending
	Message string `json:"message,omitempty"`
	Source  string `json:"source,omitempty"`
}

func newWaitCommand(e *env) *cobra.Command {
	o := waitOptions{interval: 200 * time.Millisecond, notifiedInterval: time.Second}
	cmd := &cobra.Command{
		Use:   "wait GEN",
		Short: "Wait until a requested generation is done (or pushed), exit 1 if it failed",
		Long: `Wait until the request for generation GEN in STATE_DIR/wal has an outcome.
done: exit 0. failed: the reason on stderr, exit 1. With --pushed, a done
generation is also waited on until its commit is in the daemon's repository
and the push queue holds no job for it or an earlier generation (it reached
the remote); a queue that stopped and needs
attention ends the wait with exit 1 and its error. --timeout ends the wait
with exit 2 (the generation may still land: run it again). Reads only;
safe while the daemon runs. A request for GEN that is not in the log yet is
waited for like a pending one.

--once does not wait: it prints the current state (pending, done, pushed
with --pushed, or failed with its reason) and exits 0 whatever it is;
only a log or queue it cannot read exits 2 (the trainer-side Python
helper's status() runs snapd wait GEN --once --json).

--json prints one object: {"gen", "state", "message", "source"}.`,
		Example: `  snapd wait 3 --state-dir /data/snapd
  snapd wait 3 --pushed --timeout 10m --json
  snapd wait 3 --once --json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || g == 0 {
				return usageError{fmt.Errorf("GEN must be a generation number >= 1")}
			}
			o.gen = g
			if o.stateDir, err = e.existingStateDir(cmd); err != nil {
				return err
			}
			o.branch = configs.Default().Git.Branch
			if p := e.configPath(cmd); p != "" {
				c, err := configs.Load(p)
				if err != nil {
					return usageError{err}
				}
				o.branch = c.Git.Branch
			}
			return runWait(cmd.Context(), e, &o)
		},
	}
	cmd.Flags().BoolVar(&o.pushed, "pushed", false, "also wait until the generation reached the Git remote (the push queue holds no job up to GEN)")
	cmd.Flags().BoolVar(&o.once, "once", false, "do not wait: print the current state (pending, done, pushed, failed) and exit 0 whatever it is")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "give up after this long (e.g. 10m; 0: wait for ever)")
	cmd.Flags().BoolVar(&o.json, "json", false, usageJSON)
	return cmd
}

// errWaitTimeout ends a wait that ran out of time.
var errWaitTimeout = errors.New("timed out")

func runWait(ctx context.Context, e *env, o *waitOptions) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	w := newWaitWatcher(o)
	defer w.close()
	var last waitResult
	for {
		w.add() // directories that appeared since the last check
		r, final, err := waitCheck(o)
		if err != nil {
			return err
		}
		last = r
		if final || o.once {
			break
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return withHint(ioError{fmt.Errorf("wait for generation %d: %w after %s (state %s)", o.gen, errWaitTimeout, o.timeout, last.State)},
					"the daemon may still be working on it: snapd status; run snapd wait again")
			}
			return ctx.Err()
		case <-w.changed:
		case <-time.After(w.interval):
		}
	}
	if o.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(last); err != nil {
			return err
		}
	} else if o.once && last.State == "failed" {
		fmt.Fprintf(e.stdout, "generation %d failed: %s\n", last.Gen, last.Message)
	} else if last.State != "failed" {
		fmt.Fprintf(e.stdout, "generation %d %s\n", last.Gen, last.State)
	}
	if last.State == "failed" && !o.once {
		return fmt.Errorf("generation %d failed: %s", last.Gen, last.Message)
	}
	return nil
}

// waitCheck reads the WAL (and with --pushed the push queue) once; final
// reports whether the wait is over.
func waitCheck(o *waitOptions) (waitResult, bool, error) {
	r := waitResult{Gen: o.gen, State: "pending"}
	entries, err := wal.List(filepath.Join(o.stateDir, pipeline.WALDir), nil)
	if err != nil {
		return r, false, ioError{fmt.Errorf("read the request log: %w", err)}
	}
	// The newest request for the generation decides (a resumed run may
	// have asked for the same number again).
	found := false
	for _, en := range entries {
		if en.Gen != o.gen {
			continue
		}
		found = true
		r.Source = en.Source
		switch en.State {
		case wal.Done:
			r.State, r.Message = "done", ""
		case wal.Failed:
			r.State, r.Message = "failed", en.Message
		default:
			r.State, r.Message = "pending", ""
		}
	}
	if !found || r.State == "pending" {
		return r, false, nil
	}
	if r.State == "failed" || !o.pushed {
		return r, true, nil
	}
	qdir := filepath.Join(o.stateDir, pipeline.QueueDir)
	if _, err := os.Stat(qdir); errors.Is(err, os.ErrNotExist) {
		return r, false, withHint(usageError{fmt.Errorf("--pushed: %s has no push queue", o.stateDir)},
			"the daemon keeps a push queue only with a Git remote (--git-remote, git.remote)")
	}
	q, err := queue.Open(qdir, queue.Options{Shared: true})
	if err != nil {
		return r, false, ioError{err}
	}
	st, err := q.Status()
	if err != nil {
		return r, false, ioError{err}
	}
	jobs, err := q.List()
	if err != nil {
		return r, false, ioError{err}
	}
	for _, j := range jobs {
		if j.Gen <= o.gen {
			if st.State == queue.StateNeedsAttention {
				msg := st.LastError
				if st.Hold != nil {
					msg = st.Hold.Kind + ": " + st.Hold.Error
				}
				r.State, r.Message = "failed", "the push queue needs attention: "+msg
				return r, true, nil
			}
			return r, false, nil
		}
	}
	// Done but not in the queue: pushed once its commit exists (in the
	// skeleton layout the queue job makes the commit; a job the daemon
	// could not enqueue is not "pushed").
	repoDir := filepath.Join(o.stateDir, pipeline.RepoDir)
	if _, err := os.Stat(filepath.Join(repoDir, "HEAD")); err != nil {
		return r, false, nil // no repository yet (OpenRepo would create one)
	}
	repo, err := gitops.OpenRepo(repoDir, gitops.Config{Branch: o.branch})
	if err != nil {
		return r, false, nil
	}
	if _, err := repo.ResolveGen(o.gen); err != nil && !errors.Is(err, gitops.ErrPruned) {
		return r, false, nil // (a pruned generation was pushed before retention.repo cut it)
	}
	r.State = "pushed"
	return r, true, nil
}

// waitWatcher wakes a wait when the request log, the push queue or its
// jobs change (fsnotify), so a generation's outcome is seen when it is
// written rather than up to a polling period later; it polls at
// o.interval when notifications are unavailable.
type waitWatcher struct {
	w        *fsnotify.Watcher
	dirs     []string
	added    map[string]bool
	changed  chan struct{}
	done     chan struct{}
	interval time.Duration
}

func newWaitWatcher(o *waitOptions) *waitWatcher {
	x := &waitWatcher{interval: o.interval, changed: make(chan struct{}, 1), done: make(chan struct{}), added: map[string]bool{}}
	qdir := filepath.Join(o.stateDir, pipeline.QueueDir)
	x.dirs = []string{filepath.Join(o.stateDir, pipeline.WALDir)}
	if o.pushed {
		jd := queue.JobDirs(qdir, o.branch)
		x.dirs = append(x.dirs, qdir, jd[0], jd[1])
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return x
	}
	x.w = w
	x.interval = o.notifiedInterval
	go func() {
		for {
			select {
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				select {
				case x.changed <- struct{}{}:
				default:
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			case <-x.done:
				return
			}
		}
	}()
	return x
}

// add watches the directories that exist and are not watched yet.
func (x *waitWatcher) add() {
	if x.w == nil {
		return
	}
	for _, d := range x.dirs {
		if !x.added[d] && x.w.Add(d) == nil {
			x.added[d] = true
		}
	}
}

func (x *waitWatcher) close() {
	if x.w != nil {
		close(x.done)
		x.w.Close()
	}
}
