package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

func newWALCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wal",
		Short: "Inspect the snapshot request log",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError{fmt.Errorf("missing subcommand (list, repair)")}
		},
	}
	cmd.AddCommand(newWALListCommand(e), newWALRepairCommand(e))
	return cmd
}

type walListOptions struct {
	stateDir string
	json     bool
}

func newWALListCommand(e *env) *cobra.Command {
	var o walListOptions
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every request with its state (pending, done, failed)",
		Long: `List the requests in STATE_DIR/wal in log order with their state: pending
(not handled yet), done (snapshotted) or failed (with the failure message),
followed by generations whose outcome is recorded but whose requests were
already removed from the log. Reads only; safe while the daemon runs.
Corrupt lines are reported on stderr (and under "corrupt" with --json).
A damaged cursor (past the end of its segment, inside a line, or above
every segment: requests would be appended where the daemon never reads)
is reported after the list (under "cursor_error" with --json) and the
command exits 1; snapd wal repair fixes it.`,
		Example: `  snapd wal list
  snapd wal list --state-dir /var/lib/snapd-ml --json | jq '.requests[] | select(.state=="failed")'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.stateDir, err = e.existingStateDir(cmd); err != nil {
				return err
			}
			return runWALList(cmd.Context(), e, &o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, usageJSON)
	return cmd
}

// walEntryJSON is one request in `wal list --json`.
type walEntryJSON struct {
	Gen       uint64 `json:"gen"`
	State     string `json:"state"`
	Message   string `json:"message,omitempty"`
	InLog     bool   `json:"in_log"` // false: the request was consumed and removed
	Segment   uint64 `json:"segment"`
	Offset    int64  `json:"offset"`
	Time      string `json:"ts"` // request time (RFC 3339, UTC); outcome time when !in_log
	Requester string `json:"requester,omitempty"`
	Source    string `json:"source"`
	// ResumedFrom: the request declared that the run restarted from
	// this generation's checkpoint (request-snapshot --resumed-from).
	ResumedFrom uint64 `json:"resumed_from,omitempty"`
	// Meta: the metadata the request attached (request-snapshot --meta,
	// request_snapshot(meta=...)), an object of JSON scalars.
	Meta snapshot.UserMeta `json:"meta,omitempty"`
}

type walCorruptJSON struct {
	Segment uint64 `json:"segment"`
	Offset  int64  `json:"offset"`
	Length  int64  `json:"length"`
	Reason  string `json:"reason"`
}

func runWALList(ctx context.Context, e *env, o *walListOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := stateWALDir(o.stateDir)
	if _, err := os.Stat(dir); err != nil {
		return withHint(ioError{fmt.Errorf("no request log: %w", err)}, "pass the daemon's --state-dir")
	}
	var corrupt []*wal.CorruptError
	entries, err := wal.List(dir, func(ce *wal.CorruptError) { corrupt = append(corrupt, ce) })
	if err != nil {
		return ioError{err}
	}
	// The cursor is checked after the listing: the list is still shown.
	cerr := wal.CheckCursor(dir)
	if cerr != nil && !errors.Is(cerr, wal.ErrCursorDamaged) {
		return ioError{cerr}
	}
	if o.json {
		doc := struct {
			Requests    []walEntryJSON   `json:"requests"`
			Corrupt     []walCorruptJSON `json:"corrupt"`
			CursorError string           `json:"cursor_error,omitempty"`
		}{Requests: []walEntryJSON{}, Corrupt: []walCorruptJSON{}}
		if cerr != nil {
			doc.CursorError = cerr.Error()
		}
		for _, en := range entries {
			doc.Requests = append(doc.Requests, walEntryJSON{
				Gen: en.Gen, State: en.State.String(), Message: en.Message, InLog: en.HasRecord,
				Segment: en.Pos.Segment, Offset: en.Pos.Offset, Time: en.Time.UTC().Format(time.RFC3339Nano),
				Requester: en.Requester, Source: en.Source, ResumedFrom: en.ResumedFrom, Meta: en.Meta,
			})
		}
		for _, ce := range corrupt {
			doc.Corrupt = append(doc.Corrupt, walCorruptJSON{ce.Segment, ce.Offset, ce.Length, ce.Reason})
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			return err
		}
		return walCursorDamage(cerr)
	}
	for _, ce := range corrupt {
		fmt.Fprintf(e.stderr, "snapd: warning: %v\n", ce)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GEN\tSTATE\tREQUESTED\tBY\tPOS\tRESUMED_FROM\tMETA\tSOURCE\tMESSAGE")
	for _, en := range entries {
		pos, by, resumed, meta := en.Pos.String(), en.Requester, "-", "-"
		if !en.HasRecord {
			pos, by = "(removed)", "-"
		}
		if en.ResumedFrom != 0 {
			resumed = strconv.FormatUint(en.ResumedFrom, 10)
		}
		if len(en.Meta) > 0 {
			meta = en.Meta.String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", en.Gen, en.State, en.Time.UTC().Format(time.RFC3339), by, pos, resumed, meta, en.Source, en.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return walCursorDamage(cerr)
}

// walCursorDamage is the error of a WAL cursor check: a damaged cursor
// exits 1 with the repair as hint, an unreadable cursor file 2; nil for
// nil.
func walCursorDamage(err error) error {
	if err == nil {
		return nil
	}
	if !errors.Is(err, wal.ErrCursorDamaged) {
		return ioError{err} // unreadable cursor file
	}
	return withHint(err, "stop the daemon, then run: snapd wal repair --state-dir DIR")
}
