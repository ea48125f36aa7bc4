package main

import (
	"fmt"
	"io"

	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/pipeline"
)

// writeOCIStatus prints the registry side of the skeleton layout.
func writeOCIStatus(w io.Writer, o *pipeline.OCIStats) {
	repo := o.Repository
	if repo == "" {
		repo = "(nothing uploaded yet)"
	}
	fmt.Fprintf(w, "oci registry: %s: %d generations, %d bytes uploaded, %d skipped (already present), %d mounted; %d bytes pending (%d generations not committed yet)\n",
		repo, o.Generations, o.UploadedBytes, o.SkippedBytes, o.MountedBytes, o.PendingBytes, o.Publishing)
	if l := o.Last; l != nil {
		fmt.Fprintf(w, "  last: gen %d %s %s: %d segments, %d bytes uploaded, %d skipped, %d mounted\n",
			l.Gen, l.Tag, l.Manifest, l.Segments, l.UploadedBytes, l.SkippedBytes, l.MountedBytes)
	}
}

// jobCommit is a queue job's short commit, or what its Publish work
// (registry upload, then commit) has reached.
func jobCommit(j queue.Job) string {
	switch {
	case len(j.Commit) >= 12:
		return j.Commit[:12]
	case j.Publish != nil && j.Publish.Sent:
		return "(uploaded)"
	case j.Publish != nil:
		return "(uploading)"
	}
	return j.Commit
}
