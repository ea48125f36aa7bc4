package oci

import "github.com/snapd-ml/snapd/formats/wtxt"

// AutoMaxSegments is how many segments AutoSegmentSize keeps a generation
// under. A manifest layer costs about 280 bytes of JSON (descriptor and
// title; TestScaleOnPaper measures it), so 8192 layers make a ~2.3 MB
// manifest: well under the 4 MiB that the distribution registry accepts
// for a manifest by default (and that snapd reads, maxManifestBytes).
const AutoMaxSegments = 8192

// AutoSegmentSize returns the segment size for a WTXT file of wtxtBytes:
// wtxt.DefaultSegmentSize (4 MiB), doubled until the raw bytes it holds
// (57/78 of the WTXT, the base64 line ratio; a slight overestimate) fit in
// AutoMaxSegments segments. Up to about 32 GiB of raw tensors that is
// 4 MiB; a 70B bf16 checkpoint (140 GB) gets 32 MiB. The result depends on
// the file size only, which is fixed by the model's shapes, so every
// generation of one model gets the same segment boundaries (and the
// registry's deduplication keeps working).
func AutoSegmentSize(wtxtBytes int64) int64 {
	seg := int64(wtxt.DefaultSegmentSize)
	if wtxtBytes <= 0 {
		return seg
	}
	raw := wtxtBytes / 78 * 57
	for raw/seg >= AutoMaxSegments && seg < wtxt.DefaultMaxSegment {
		seg *= 2
	}
	return seg
}
