package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/gitops/layout"
)

func newAssembleCommand(e *env) *cobra.Command {
	var o ociReadFlags
	cmd := &cobra.Command{
		Use:   "assemble PARTS_DIR|SKELETON OUT.wtxt",
		Short: "Concatenate a split (git-scale) snapshot's part files back into its WTXT",
		Long: `A generation larger than the split threshold is stored in Git as a
directory of part files cut at array and chunk boundaries, listed in order
with their sizes and SHA-256 in PARTS_DIR/MANIFEST. assemble checks every
part against the MANIFEST and writes their concatenation, which is the
original WTXT byte for byte, to OUT atomically. A segments-layout directory
(current.wtxt.segs/: skeleton pieces and seg/<hh>/<sha256>.seg raw
segments) is recognised by its first piece and rebuilt the way snapd
checkout does: every piece's and segment's size and SHA-256 and every
chunk's sha256 and crc32c checked.

With --oci-repository the first argument is a skeleton (snapd oci push):
the WTXT is rebuilt from it and the registry's segment blobs, streaming,
checking every chunk's sha256 and crc32c and every blob's digest; on any
failure nothing is written to OUT. A skeleton whose generation's tensor
bytes retention removed (a blob and the gen-NNNNNN manifest not found)
fails with "content collected: ..." after the skeleton was checked alone,
exit status 1.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.repository != "" {
				return runAssembleOCI(cmd.Context(), e, &o, args[0], args[1])
			}
			return runAssemble(cmd.Context(), e, args[0], args[1])
		},
	}
	o.register(cmd.Flags())
	return cmd
}

func runAssemble(ctx context.Context, e *env, dir, out string) error {
	if layout.DetectPartsDir(os.DirFS(dir)) == layout.Segments {
		// The segments layout (current.wtxt.segs/): its MANIFEST lists the
		// skeleton's pieces; the WTXT is rebuilt with the segment blobs.
		m := e.meter(filepath.Base(out), 0)
		err := writeAtomic(out, func(f *os.File) error { return layout.AssembleSkeletonFS(ctx, os.DirFS(dir), ".", m.Writer(f)) })
		return endMeter(m, err)
	}
	m := e.meter(filepath.Base(out), manifestSize(dir))
	err := writeAtomic(out, func(f *os.File) error { return layout.Assemble(dir, m.Writer(f)) })
	return endMeter(m, err)
}

// manifestSize is the assembled size the MANIFEST in dir states, for the
// progress line (0 when it cannot be read: Assemble reports why).
func manifestSize(dir string) int64 {
	b, err := readLimited(filepath.Join(dir, layout.ManifestName), layout.MaxManifestSize)
	if err != nil {
		return 0
	}
	m, err := layout.ParseManifest(b)
	if err != nil {
		return 0
	}
	var n int64
	for _, p := range m.Parts {
		if n+p.Size < n {
			return 0
		}
		n += p.Size
	}
	return n
}
