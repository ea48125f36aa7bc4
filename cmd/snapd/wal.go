package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/wal"
)

func newWALCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wal",
		Short: "Inspect the snapshot request log",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError{fmt.Errorf("missing subcommand (list)")}
		},
	}
	cmd.AddCommand(newWALListCommand(e))
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
Corrupt lines are reported on stderr (and under "corrupt" with --json).`,
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
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON: {\"requests\": [...], \"corrupt\": [...]}")
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
	if o.json {
		doc := struct {
			Requests []walEntryJSON   `json:"requests"`
			Corrupt  []walCorruptJSON `json:"corrupt"`
		}{Requests: []walEntryJSON{}, Corrupt: []walCorruptJSON{}}
		for _, en := range entries {
			doc.Requests = append(doc.Requests, walEntryJSON{
				Gen: en.Gen, State: en.State.String(), Message: en.Message, InLog: en.HasRecord,
				Segment: en.Pos.Segment, Offset: en.Pos.Offset, Time: en.Time.UTC().Format(time.RFC3339Nano),
				Requester: en.Requester, Source: en.Source,
			})
		}
		for _, ce := range corrupt {
			doc.Corrupt = append(doc.Corrupt, walCorruptJSON{ce.Segment, ce.Offset, ce.Length, ce.Reason})
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	for _, ce := range corrupt {
		fmt.Fprintf(e.stderr, "snapd: warning: %v\n", ce)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GEN\tSTATE\tREQUESTED\tBY\tPOS\tSOURCE\tMESSAGE")
	for _, en := range entries {
		pos, by := en.Pos.String(), en.Requester
		if !en.HasRecord {
			pos, by = "(removed)", "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", en.Gen, en.State, en.Time.UTC().Format(time.RFC3339), by, pos, en.Source, en.Message)
	}
	return tw.Flush()
}
