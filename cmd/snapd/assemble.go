package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/gitops"
)

func newAssembleCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "assemble PARTS_DIR OUT.wtxt",
		Short: "Concatenate a split (git-scale) snapshot's part files back into its WTXT",
		Long: `A generation larger than the split threshold is stored in Git as a
directory of part files cut at array and chunk boundaries, listed in order
with their sizes and SHA-256 in PARTS_DIR/MANIFEST. assemble checks every
part against the MANIFEST and writes their concatenation, which is the
original WTXT byte for byte, to OUT atomically.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAssemble(cmd.Context(), args[0], args[1])
		},
	}
	return cmd
}

func runAssemble(_ context.Context, dir, out string) error {
	return writeAtomic(out, func(f *os.File) error { return gitops.Assemble(dir, f) })
}
