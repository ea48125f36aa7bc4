package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/wal"
)

type walRepairOptions struct {
	stateDir string
}

func newWALRepairCommand(e *env) *cobra.Command {
	var o walRepairOptions
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Repair a damaged request-log cursor so that no request is lost",
		Long: `Repair the cursor of STATE_DIR/wal when it cannot be where the daemon
stopped: past the end of its segment (a lost tail), inside a line, or in a
segment above every segment present (a state directory restored from mixed
backups). snapd run, snapd wal list and snapd status refuse such a cursor,
because every request appended afterwards would land where the daemon never
reads.

The new cursor is the end of the longest run of requests, from the start of
the cursor's segment (or of the lowest segment when that one is gone), that
are already handled (generation done, or this very request failed). Every
request after it is delivered again: those already handled are skipped by
generation, those never handled are handled. No request is skipped. The
cursor file is replaced atomically (temp file, fsync, rename, fsync of the
directory). The daemon must be stopped (the command takes its lock). A sound
cursor is left as it is.`,
		Example: `  snapd wal repair --state-dir /var/lib/snapd-ml`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.stateDir, err = e.existingStateDir(cmd); err != nil {
				return err
			}
			return runWALRepair(cmd.Context(), e, &o)
		},
	}
	return cmd
}

func runWALRepair(ctx context.Context, e *env, o *walRepairOptions) error {
	dir := stateWALDir(o.stateDir)
	if _, err := os.Stat(dir); err != nil {
		return withHint(ioError{fmt.Errorf("no request log: %w", err)}, "pass the daemon's --state-dir")
	}
	rep, err := wal.RepairCursor(ctx, dir)
	if errors.Is(err, wal.ErrLocked) {
		return withHint(ioError{err}, "stop the daemon (snapd run) first")
	}
	if err != nil {
		return ioError{err}
	}
	for _, ce := range rep.Corrupt {
		fmt.Fprintf(e.stderr, "snapd: warning: %v\n", ce)
	}
	if rep.Damage == nil {
		fmt.Fprintf(e.stdout, "cursor %s is sound: nothing to repair\n", rep.Old)
		return nil
	}
	fmt.Fprintf(e.stdout, "damaged: %s\n", rep.Damage.Reason)
	fmt.Fprintf(e.stdout, "cursor moved from %s to %s", rep.Old, rep.New)
	if rep.HasLastHandled {
		fmt.Fprintf(e.stdout, " (after gen %d at %s, the last of the handled requests before it)\n", rep.LastHandled.Gen, rep.LastHandled.Pos)
	} else {
		fmt.Fprintf(e.stdout, " (the start of the scan: no handled request precedes it)\n")
	}
	fmt.Fprintf(e.stdout, "requests before the old cursor delivered again: %d (%d already handled, skipped by generation; %d never handled", rep.Redelivered, rep.Redelivered-rep.Unhandled, rep.Unhandled)
	if rep.Unhandled > 0 {
		fmt.Fprintf(e.stdout, ", the first gen %d at %s", rep.FirstUnhandled.Gen, rep.FirstUnhandled.Pos)
	}
	fmt.Fprintf(e.stdout, ")\n")
	return nil
}
