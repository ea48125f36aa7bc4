package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/gitops"
)

type logOptions struct {
	repo, branch string
	max          int
	json         bool
}

func newLogCommand(e *env) *cobra.Command {
	var o logOptions
	cmd := &cobra.Command{
		Use:   "log",
		Short: "List the generations on the snapshot branch with their metadata",
		Long: `List the generation commits of the snapshot branch, newest first: the
generation, its ts, the commit, and the metadata the trainer attached
(snapd request-snapshot --meta, request_snapshot(meta=...)). Resume
records are listed where they are, and generations a resume abandoned are
marked. Follows first parents from the branch head to the first
generation (or to the base branch's tip). The metadata is read from each
commit's Snapd-Meta trailer, so the command reads commit messages only
and works on any clone; snapd verify-repo checks every trailer against
the metadata inside its generation (covered by the WTXT's hashes and
signature). An age-armored generation carries no trailer: its metadata
stays encrypted inside it. The repository is --repo (default: the
daemon's STATE_DIR/repo when --state-dir is given, which keeps only the
newest pushed generations: the listing then says where its history
ends; else the current directory).

--json prints {"branch": ..., "generations": [...]} (docs/JSON.md).`,
		Example: `  snapd log --repo /var/lib/snapd-ml/repo
  snapd log -n 5 --json | jq '.generations[] | {gen, loss: .meta.loss}'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.repo = readRepoDir(cmd, e, o.repo)
			return runLog(cmd.Context(), e, &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", ".", repoFlagUsage)
	registerBranch(f, &o.branch)
	f.IntVarP(&o.max, "max-count", "n", 0, "list at most N entries (0: all)")
	f.BoolVar(&o.json, "json", false, usageJSON)
	return cmd
}

// logEntryJSON is one entry of `snapd log --json`.
type logEntryJSON struct {
	Kind      string          `json:"kind"` // "generation" or "resume"
	Gen       uint64          `json:"gen"`
	GenText   string          `json:"gen_text"`
	TS        string          `json:"ts"`
	Commit    string          `json:"commit"`
	Layout    string          `json:"layout,omitempty"`
	Meta      json.RawMessage `json:"meta"` // the canonical JSON object, {} for none
	MetaError string          `json:"meta_error,omitempty"`
	Abandoned bool            `json:"abandoned,omitempty"`
	// A resume record: the generations it abandoned, FIRST..LAST.
	AbandonedFirst string `json:"abandoned_first,omitempty"`
	AbandonedLast  string `json:"abandoned_last,omitempty"`
}

func runLog(ctx context.Context, e *env, o *logOptions) error {
	if o.max < 0 {
		return usageError{fmt.Errorf("--max-count %d: want 0 (all) or more", o.max)}
	}
	repo, err := openReadRepo(o.repo, gitops.Config{Branch: o.branch})
	if err != nil {
		return err
	}
	entries, err := repo.Log(ctx, o.max)
	if err != nil {
		return ioError{err}
	}
	if o.json {
		doc := struct {
			Branch      string         `json:"branch"`
			Generations []logEntryJSON `json:"generations"`
			Shallow     bool           `json:"shallow,omitempty"`
		}{Branch: repo.Config().Branch, Generations: []logEntryJSON{}, Shallow: shallowEnd(entries)}
		for _, en := range entries {
			j := logEntryJSON{Kind: "generation", Gen: en.Gen, GenText: en.GenText, TS: en.TS, Commit: en.Commit.String(),
				Layout: en.Layout, Meta: en.Meta.JSON(), Abandoned: en.Abandoned}
			if j.Meta == nil {
				j.Meta = json.RawMessage("{}")
			}
			if en.MetaErr != nil {
				j.MetaError = en.MetaErr.Error()
			}
			if r := en.Resume; r != nil {
				j.Kind, j.AbandonedFirst, j.AbandonedLast = "resume", r.AbandonedFirst, r.AbandonedLast
			}
			doc.Generations = append(doc.Generations, j)
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GEN\tTS\tCOMMIT\tMETA")
	for _, en := range entries {
		commit := en.Commit.String()[:12]
		switch {
		case en.Resume != nil:
			fmt.Fprintf(tw, "%s\t%s\t%s\tresume from %s (abandons %s..%s)\n", en.GenText, en.TS, commit, en.GenText, en.Resume.AbandonedFirst, en.Resume.AbandonedLast)
			continue
		}
		meta := "-"
		switch {
		case en.MetaErr != nil:
			meta = "(malformed trailer: " + en.MetaErr.Error() + ")"
		case len(en.Meta) > 0:
			meta = en.Meta.String()
		}
		if en.Abandoned {
			meta += "  (abandoned)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", en.GenText, en.TS, commit, meta)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if shallowEnd(entries) {
		fmt.Fprintf(e.stdout, "(older generations are not in this shallow repository (the daemon's keeps only the newest pushed ones: retention.repo); snapd clone REMOTE DIR --full has them all)\n")
	}
	return nil
}

// shallowEnd reports whether the listing ended at a shallow boundary
// with older history left out.
func shallowEnd(entries []gitops.LogEntry) bool {
	return len(entries) > 0 && entries[len(entries)-1].Shallow
}
