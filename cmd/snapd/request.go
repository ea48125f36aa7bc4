package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats/dcp"
	"github.com/snapd-ml/snapd/wal"
)

// stateWALDir and stateGensDir are the fixed subdirectories of a state dir.
func stateWALDir(stateDir string) string  { return filepath.Join(stateDir, "wal") }
func stateGensDir(stateDir string) string { return filepath.Join(stateDir, "gens") }

type requestOptions struct {
	stateDir  string
	gen       uint64
	source    string
	requester string
	rank      int
	worldSize int
	resumed   uint64
	meta      []string // --meta KEY=VALUE
	metaJSON  string   // --meta-json
}

func newRequestSnapshotCommand(e *env) *cobra.Command {
	var o requestOptions
	cmd := &cobra.Command{
		Use:   "request-snapshot --gen N --source PATH",
		Short: "Ask the daemon to snapshot a published generation (appends one WAL line)",
		Long: `Append one "snapshot requested" line to STATE_DIR/wal and exit. No daemon
needs to be running; the daemon picks the request up when it runs. The
source must exist (publish the generation first); it is recorded as an
absolute path. It is a checkpoint file or a directory: a Hugging Face
sharded checkpoint (model.safetensors.index.json + shards), a
torch.distributed.checkpoint (DCP) directory (.metadata + __R_N.distcp,
any world size: every tensor is assembled whole), or a directory of
checkpoint files, read as one snapshot. A DCP directory is complete once
torch has written its .metadata (last); requested earlier, the daemon
retries it until it is complete. Python trainers can do the same
without a subprocess with scripts/snapd_trainer.py (publish_generation,
publish_generation_dir, request_snapshot). Generations are
1..999999999999999999 (at most 18 decimal digits: what the WTXT writer and
parser agree on); others are refused.

With --rank R --world-size W the source is rank R's shard of generation N
of a job written by W ranks (a sharded job): the daemon (configured with a
ranks: section) converts and uploads it as that rank's part, and the
committer makes the generation's one Git commit once all W parts are in.

With --resumed-from R the run restarted from generation R's checkpoint
(after a crash, training resumed from an earlier step): the daemon chains
generation N (> R) to R and records the generations it had above R as
abandoned in a signed ledger record (their commits stay in the history;
verify-repo checks the fork). Without it, a generation number the daemon
already snapshotted from another source or other content fails, and
snapd wal list and snapd status show why.

--meta KEY=VALUE (repeatable) and --meta-json '{...}' attach metadata to
the generation (step, epoch, loss, learning rate, ...): JSON scalars, at
most 64 keys of [A-Za-z0-9_.-]{1,64}, strings of at most 256 bytes, 2048
bytes of canonical JSON (docs/FORMAT.md "Generation metadata"). A --meta
VALUE is read as JSON when it is a JSON scalar (1200, 0.41, 3e-4, true,
null, "quoted") and taken as a string otherwise. The daemon stores it
inside the generation, covered by its hashes and signature; wal list,
status, snapd log, diff, the review and the commit's Snapd-Meta trailer
show it. With --rank it is stored in that rank's part, and every rank of
the generation must give the same metadata: the job's committer refuses
a generation whose ranks differ (snapd ranks status names them).`,
		Example: `  snapd request-snapshot --gen 123 --source .snapd/gens/gen-000123.safetensors
  snapd request-snapshot --gen 124 --source .snapd/gens/gen-000124/
  snapd request-snapshot --gen 125 --source /data/ckpt/step-125/rank-3.safetensors --rank 3 --world-size 8
  snapd request-snapshot --gen 3 --source /data/ckpt/resumed/step-3.pt --resumed-from 2
  snapd request-snapshot --gen 126 --source .snapd/gens/gen-000126.pt --meta step=1200 --meta loss=0.41
  snapd request-snapshot --gen 127 --source .snapd/gens/gen-000127.pt --meta-json '{"step": 1300, "lr": 3e-4}'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.stateDir, err = e.resolveStateDir(cmd); err != nil {
				return err
			}
			return runRequestSnapshot(cmd.Context(), e, &o)
		},
	}
	fl := cmd.Flags()
	fl.Uint64Var(&o.gen, "gen", 0, "generation number")
	fl.StringVar(&o.source, "source", "", "path of the published generation (file or directory)")
	fl.StringVar(&o.requester, "requester", "", "who asks, 1..64 of [A-Za-z0-9._:@/+-] (default cli:PID)")
	fl.IntVar(&o.rank, "rank", -1, "this shard's rank 0..W-1 (with --world-size)")
	fl.IntVar(&o.worldSize, "world-size", 0, "number of ranks writing the generation, 1..65536 (with --rank)")
	fl.Uint64Var(&o.resumed, "resumed-from", 0, "the run restarted from this generation's checkpoint, 1..N-1 (the generations above it are abandoned)")
	fl.StringArrayVar(&o.meta, "meta", nil, "attach metadata KEY=VALUE to the generation (repeatable; VALUE a JSON scalar or else a string)")
	fl.StringVar(&o.metaJSON, "meta-json", "", "attach metadata given as one JSON object of scalars (with --meta: keys must not repeat)")
	cmd.MarkFlagsRequiredTogether("rank", "world-size")
	cmd.MarkFlagRequired("gen")
	cmd.MarkFlagRequired("source")
	return cmd
}

func runRequestSnapshot(ctx context.Context, e *env, o *requestOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if o.gen < 1 || o.gen > wal.MaxGen {
		return usageError{fmt.Errorf("--gen %d: out of range 1..%d (at most 18 decimal digits)", o.gen, wal.MaxGen)}
	}
	src, err := filepath.Abs(o.source)
	if err != nil {
		return usageError{fmt.Errorf("--source %q: %w", o.source, err)}
	}
	if _, err := os.Stat(src); err != nil {
		return withHint(ioError{fmt.Errorf("--source: %w", err)}, "publish the generation before requesting its snapshot")
	}
	requester := o.requester
	if requester == "" {
		requester = fmt.Sprintf("cli:%d", os.Getpid())
	}
	meta, err := requestMeta(o.meta, o.metaJSON)
	if err != nil {
		return usageError{err}
	}
	r := wal.Request{Gen: o.gen, Time: e.now(), Requester: requester, Source: src, ResumedFrom: o.resumed, Meta: meta}
	if o.worldSize != 0 || o.rank != -1 {
		r.Rank, r.WorldSize = o.rank, o.worldSize
		if o.worldSize == 0 {
			return usageError{fmt.Errorf("--rank needs --world-size")}
		}
	}
	dir := stateWALDir(o.stateDir)
	// Validate before wal.Append creates anything.
	if _, err := r.AppendLine(nil); err != nil {
		return usageError{err}
	}
	if err := wal.Append(dir, r); err != nil {
		if errors.Is(err, wal.ErrInvalidRequest) || errors.Is(err, wal.ErrLineTooLong) {
			return usageError{err}
		}
		return ioError{err}
	}
	extra := ""
	if r.WorldSize > 0 {
		extra = fmt.Sprintf(" rank=%d world_size=%d", r.Rank, r.WorldSize)
	}
	if r.ResumedFrom != 0 {
		extra += fmt.Sprintf(" resumed_from=%d", r.ResumedFrom)
	}
	if len(r.Meta) > 0 {
		extra += " meta=" + string(r.Meta.JSON())
	}
	fmt.Fprintf(e.stdout, "requested gen=%d%s src=%s wal=%s\n", o.gen, extra, src, dir)
	if r.WorldSize > 0 {
		return nil
	}
	if isDCP, _ := dcp.IsDCP(src); isDCP {
		if _, err := os.Stat(filepath.Join(src, ".metadata")); err != nil {
			fmt.Fprintf(e.stderr, "snapd: note: %s has no .metadata yet (torch.distributed.checkpoint.save still running?): the daemon retries it until it is complete\n", src)
		}
	}
	return nil
}
