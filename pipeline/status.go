package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/wal"
)

// Status is what `snapd status` shows. ReadStatus builds it from the state
// files alone, so it works whether or not the daemon runs.
type Status struct {
	StateDir string `json:"state_dir"`
	Running  bool   `json:"running"`
	PID      int    `json:"pid,omitempty"`
	// InProgress lists the stages running now (the generation and stage
	// of each), oldest first; empty unless the daemon runs.
	InProgress []Activity `json:"in_progress"`
	// Chain is the chain head (Gen 0: no generation yet).
	Chain *ChainState `json:"chain"`
	// Ring lists the generations kept locally.
	Ring []RingEntry `json:"ring"`
	// Backlog counts requests in the WAL that are not handled yet.
	Backlog int `json:"backlog"`
	// Failed lists requests whose generation failed (newest last).
	Failed []FailedRequest `json:"failed"`
	// Done counts generations recorded as done in the WAL.
	Done int `json:"done"`
	// Queue is the resend queue (nil when there is none).
	Queue *queue.Status `json:"queue,omitempty"`
	// OCI is the registry upload of the skeleton layout (nil when the
	// daemon never published to a registry): bytes uploaded and skipped
	// (totals), bytes pending (from the queue), the last generation.
	OCI *OCIStats `json:"oci,omitempty"`
	// PullRequest is the pull-request step's state (nil when it never ran).
	PullRequest *PullRequestState `json:"pull_request,omitempty"`
	// Ranks is the committer's state on the committer node of a sharded
	// job (nil elsewhere): last committed and pending generation, missing
	// or refused ranks, timeout, the last failed round.
	Ranks     *RankStatus `json:"ranks,omitempty"`
	LastError *LastError  `json:"last_error,omitempty"`
	// Warnings are problems met while reading (corrupt WAL lines, ...).
	Warnings []string `json:"warnings,omitempty"`
}

// FailedRequest is a failed request from the WAL.
type FailedRequest struct {
	Gen     uint64 `json:"gen"`
	Source  string `json:"source"`
	Message string `json:"message"`
	// Retried: a later request asked for the same generation again; the
	// newest request's outcome is the generation's (as snapd wait reads it).
	Retried bool `json:"retried,omitempty"`
}

// ReadStatus reads the state directory without locking or modifying it.
func ReadStatus(stateDir string) (*Status, error) {
	if _, err := os.Stat(stateDir); err != nil {
		return nil, err
	}
	st := &Status{StateDir: stateDir}
	st.Running, st.PID = daemonRunning(stateDir)
	st.InProgress = []Activity{}
	var err error
	if st.Running {
		if st.InProgress, err = ReadActivity(stateDir); err != nil {
			st.Warnings = append(st.Warnings, err.Error())
			st.InProgress = []Activity{}
		}
	}
	if st.Chain, err = ReadChainState(stateDir); err != nil {
		return nil, err
	}
	if st.Ring, err = ListRing(filepath.Join(stateDir, RingDir)); err != nil {
		return nil, err
	}
	if st.Ring == nil {
		st.Ring = []RingEntry{}
	}
	walDir := filepath.Join(stateDir, WALDir)
	if _, err := os.Stat(walDir); err == nil {
		ents, err := wal.List(walDir, func(e *wal.CorruptError) { st.Warnings = append(st.Warnings, e.Error()) })
		if err != nil {
			return nil, err
		}
		failedAt := map[uint64]int{} // gen → index in st.Failed of its newest failure
		for _, e := range ents {
			if i, ok := failedAt[e.Gen]; ok {
				st.Failed[i].Retried = true
				delete(failedAt, e.Gen)
			}
			switch e.State {
			case wal.Pending:
				st.Backlog++
			case wal.Failed:
				failedAt[e.Gen] = len(st.Failed)
				st.Failed = append(st.Failed, FailedRequest{Gen: e.Gen, Source: e.Source, Message: e.Message})
			case wal.Done:
				st.Done++
			}
		}
	}
	if st.Failed == nil {
		st.Failed = []FailedRequest{}
	}
	qd := filepath.Join(stateDir, QueueDir)
	if _, err := os.Stat(qd); err == nil {
		if qs, err := readQueueStatus(qd); err != nil {
			st.Warnings = append(st.Warnings, err.Error())
		} else {
			st.Queue = qs
			if !st.Running {
				qs.Pushing = nil // left by a process that is gone
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		st.Warnings = append(st.Warnings, err.Error())
	}
	if st.OCI, err = ReadOCIStats(stateDir); err != nil {
		st.Warnings = append(st.Warnings, err.Error())
	}
	if q := st.Queue; q != nil && (q.Publishing > 0 || st.OCI != nil) {
		if st.OCI == nil {
			st.OCI = &OCIStats{}
		}
		st.OCI.PendingBytes, st.OCI.Publishing = q.PublishPendingBytes, q.Publishing
	}
	if st.PullRequest, err = ReadPullRequestState(stateDir); err != nil {
		st.Warnings = append(st.Warnings, err.Error())
	}
	if rs, err := ReadRankStatus(RankStatusFile(stateDir)); err == nil {
		st.Ranks = rs
	} else if !errors.Is(err, fs.ErrNotExist) {
		st.Warnings = append(st.Warnings, err.Error())
	}
	if c := st.Chain; c != nil && len(c.NonFinite) > 0 {
		against := fmt.Sprintf("against generation %d", c.PrevGen)
		if c.PrevGen == 0 {
			against = "the first of the chain"
		}
		st.Warnings = append(st.Warnings, fmt.Sprintf("generation %d introduced NaN/Inf (%s): %s", c.Gen, against, c.nonFiniteSummary()))
	}
	if st.LastError, err = ReadLastError(stateDir); err != nil {
		st.Warnings = append(st.Warnings, err.Error())
	}
	return st, nil
}

// readQueueStatus reads the push queue's status without disturbing a
// daemon that is running it (queue.Options.Shared: no temp-file sweep).
func readQueueStatus(dir string) (*queue.Status, error) {
	q, err := queue.Open(dir, queue.Options{Shared: true})
	if err != nil {
		return nil, err
	}
	st, err := q.Status()
	if err != nil {
		return nil, err
	}
	return &st, nil
}
