package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

type gcOptions struct {
	stateDir string
	keep     int
	dryRun   bool
	json     bool
	abandon  []uint
	remote   bool
	oci      ociReadFlags
}

func newGCCommand(e *env) *cobra.Command {
	var o gcOptions
	cmd := &cobra.Command{
		Use:   "gc --keep K",
		Short: "Delete old published generations that are snapshotted and unpinned",
		Long: `Reclaim STATE_DIR/gens: delete every generation that is
  - not among the newest K (by generation number),
  - not the newest snapshotted generation (never deleted, even with --keep 0),
  - not pinned by a live process (pins of dead processes are removed first),
  - and snapshotted (done in STATE_DIR/wal) or explicitly abandoned
    (--abandon N marks generation N reclaimable although it was never
    snapshotted, e.g. after it failed; the mark is durable).
Safe while the daemon and the trainer run. The daemon applies the same
rule after every generation when retention.gens is set (default 3).`,
		Example: `  snapd gc --keep 3
  snapd gc --state-dir /var/lib/snapd-ml --keep 10 --dry-run`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.remote {
				return runGCRemote(cmd.Context(), e, &o)
			}
			var err error
			if o.stateDir, err = e.existingStateDir(cmd); err != nil {
				return err
			}
			return runGC(cmd.Context(), e, &o)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&o.keep, "keep", 0, "always keep the newest K generations")
	fl.BoolVar(&o.dryRun, "dry-run", false, usageDryRunGC)
	fl.BoolVar(&o.json, "json", false, usageJSON)
	fl.UintSliceVar(&o.abandon, "abandon", nil, "mark these generations as abandoned first (comma-separated or repeated)")
	fl.BoolVar(&o.remote, "remote", false, "instead: delete the manifests of all but the newest K generations in --oci-repository (then run the registry's own garbage collection)")
	o.oci.register(fl) // not the upload flags (--oci-jobs, --oci-mount-from)
	cmd.MarkFlagRequired("keep")
	return cmd
}

// plural is "N word" or "N words".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

type gcGenJSON struct {
	Gen    uint64 `json:"gen"`
	Name   string `json:"name"`
	Reason string `json:"reason,omitempty"`
}

func runGC(ctx context.Context, e *env, o *gcOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if o.keep < 0 {
		return usageError{fmt.Errorf("--keep %d: must be >= 0", o.keep)}
	}
	gensDir := stateGensDir(o.stateDir)
	if _, err := os.Stat(gensDir); err != nil {
		return withHint(ioError{fmt.Errorf("no generations directory: %w", err)}, "pass the daemon's --state-dir")
	}
	store, err := snapshot.OpenGenStore(gensDir)
	if err != nil {
		return ioError{err}
	}
	for _, g := range o.abandon {
		if _, err := store.Lookup(uint64(g)); err != nil {
			return usageError{fmt.Errorf("--abandon %d: %w", g, err)}
		}
		if !o.dryRun {
			if err := store.Abandon(uint64(g)); err != nil {
				return ioError{err}
			}
		}
	}
	abandoned := map[uint64]bool{}
	for _, g := range o.abandon {
		abandoned[uint64(g)] = true
	}
	rep, err := wal.ReclaimGenerations(ctx, store, stateWALDir(o.stateDir), snapshot.ReclaimOptions{
		Keep:      o.keep,
		Abandoned: func(gen uint64) bool { return abandoned[gen] },
		DryRun:    o.dryRun,
	})
	if err != nil {
		return ioError{err}
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(e.stderr, "snapd: warning: %v (generation kept)\n", w)
	}
	if o.json {
		doc := struct {
			DryRun    bool        `json:"dry_run"`
			Deleted   []gcGenJSON `json:"deleted"`
			Kept      []gcGenJSON `json:"kept"`
			StalePins int         `json:"stale_pins"` // removed (would be, with dry_run)
		}{DryRun: o.dryRun, Deleted: []gcGenJSON{}, Kept: []gcGenJSON{}, StalePins: len(rep.StalePins)}
		for _, g := range rep.Deleted {
			doc.Deleted = append(doc.Deleted, gcGenJSON{Gen: g.Gen, Name: g.Name})
		}
		for _, k := range rep.Kept {
			doc.Kept = append(doc.Kept, gcGenJSON{Gen: k.Gen, Name: k.Name, Reason: k.Reason})
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	verb := "deleted"
	if o.dryRun {
		verb = "would delete"
	}
	for _, g := range rep.Deleted {
		fmt.Fprintf(e.stdout, "%s %s\n", verb, g.Name)
	}
	for _, p := range rep.StalePins {
		if !o.dryRun {
			fmt.Fprintf(e.stderr, "snapd: removed stale pin on gen %d (pid %d gone)\n", p.Gen, p.PID)
		}
	}
	fmt.Fprintf(e.stdout, "%s %s, kept %d\n", verb, plural(len(rep.Deleted), "generation"), len(rep.Kept))
	return nil
}
