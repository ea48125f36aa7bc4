// Package chunkdiff compares two plaintext WTXT generations chunk by
// chunk: which chunks of which arrays changed (their ch lines' sha256
// differ), and from those chunks alone what changed in numbers.
//
//	NonFiniteIntroduced(ctx, base, head, budget)   NaN/±Inf a generation introduces (the daemon's warning)
//	NonFiniteFromCounts(base, head)                the same from the per-array NaN/±Inf counts wtxt.Encode reports
//	                                               (HeldNonFinite), reading nothing; the arrays holding some in
//	                                               both go to NonFiniteIntroducedIn(ctx, base, head, arrays, budget)
//	Picture(ctx, base, head, budget, opts)         the diff picture (snapshot/diffsvg) of two generations (the daemon's current.diff.svg)
//	PictureIndexed(ctx, base, bx, head, hx, ...)   the same with the indexes a caller has (the daemon's delta plan)
//
// The comparisons read the files with pread (not mapped: their pages would count in
// the daemon's RSS), index them with wtxt.ReadIndex (one look per chunk)
// and decode only the changed chunks, each checked against its crc32c; an
// array whose type, shape or chunk geometry changed is compared whole.
// A budget bounds the raw bytes decoded; a picture with
// diffsvg.Options.SampleBytes decodes of a densely changed array only the
// base64 lines of its sample (wtxt.ReadChunkPieces: pieces close together
// in the file share one pread). The files are not verified
// otherwise (wtxt.Verify's job).
//
// The daemon (pipeline) uses the package whether or not GitHub reviews
// are on; gitops/review uses it for reviews. It imports only formats/wtxt,
// snapshot and internal helpers.
package chunkdiff
