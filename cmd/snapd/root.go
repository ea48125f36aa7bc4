package main

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// version and revision are set at build time with -ldflags
// "-X main.version=... -X main.revision=..." (scripts/release.sh, from git
// describe and git rev-parse HEAD, so a release binary names its commit
// even when built with -buildvcs=false); see currentVersion.
var (
	version  = "dev"
	revision = ""
)

// env is what every command needs from the outside world; tests replace
// its fields instead of touching globals.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
	logger         *slog.Logger
	global         globalOptions // root persistent flags (globals.go)
	forceTTY       bool          // tests: draw progress on stderr as on a terminal
}

func newEnv(stdout, stderr io.Writer) *env {
	return &env{
		stdout: stdout,
		stderr: stderr,
		getenv: os.Getenv,
		now:    time.Now,
		logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

func newRootCommand(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "snapd",
		Short: "Auditable ML checkpoints in Git: deterministic, signed, ASCII WTXT snapshots",
		Long: `snapd converts ML training checkpoints into WTXT 1.1. It reads PyTorch .pt,
safetensors, NumPy .npy/.npz, DCP directories (torch.distributed.checkpoint),
checkpoint directories (Hugging Face sharded, Trainer checkpoint-N), zTensor,
FOLD, AERO and STB. WTXT 1.1 is a deterministic, ASCII-only snapshot with
per-line parity, per-chunk CRC32C/SHA-256, per-array HMAC, a Merkle chain
across generations and an Ed25519 signature. As a daemon (snapd run) it snapshots every
generation a training job requests, writes DELTA v2 diffs and pushes them to
Git; in CI it verifies snapshots and their history with public keys only.
Start with: snapd demo

Exit codes: 0 ok, 1 invalid input or failed check, 2 usage or I/O error.`,
		Version:       currentVersion().Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	addGlobalFlags(root, &e.global)
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(
		newKeygenCommand(e),
		newConvertCommand(e),
		newVerifyCommand(e),
		newInspectCommand(e),
		newDiffCommand(e),
		newDeltaCommand(e),
		newDecryptCommand(e),
		newDemoCommand(e),
		newQueueCommand(e),
		newAssembleCommand(e),
		newRunCommand(e),
		newStatusCommand(e),
		newReviewCommand(e),
		newRequestSnapshotCommand(e),
		newWaitCommand(e),
		newWALCommand(e),
		newGCCommand(e),
		newVerifyRepoCommand(e),
		newCloneCommand(e),
		newCheckoutCommand(e),
		newLogCommand(e),
		newVersionCommand(e),
		newOCICommand(e),
		newRanksCommand(e),
	)
	return root
}

// exactArgs and maxArgs wrap cobra's positional-argument validators so
// that a wrong count is a usage error (exit 2).
func exactArgs(n int) cobra.PositionalArgs { return usageArgs(cobra.ExactArgs(n)) }

func maxArgs(n int) cobra.PositionalArgs { return usageArgs(cobra.MaximumNArgs(n)) }

func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
