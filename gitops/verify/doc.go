// Package verify checks a snapshot repository written by gitops.Repo with
// public keys only — no HMAC key, no age identity, nothing secret — as a CI
// job does (`snapd verify-repo`, scripts/ci-verify.sh).
//
// # What is walked
//
// The first-parent chain of the branch (Options.Branch, default
// "snapshots"; resolved as refs/heads/B, else refs/remotes/origin/B as in
// a CI checkout of another ref, else as a revision), from its root commit
// (or the first generation commit whose Snapd-Base trailer names its only
// parent: a branch started from a base branch, gitops.BaseOf), or from
// Options.Since, to its head, oldest first. Every commit on the
// chain must be a generation commit: gitops.Repo never writes any other
// kind, so a commit without the Snapd-* trailers is a failure, and so is a
// merge commit ("history"). Open opens a local repository (bare, a work
// tree, or a subdirectory of one) or clones a URL (file://, http(s)://
// with an optional Basic-auth token, ssh://) bare into a temp directory,
// fetching only the branch and all tags.
//
// # Checks per generation (the Failure.Check values)
//
// Trust comes first: the commit signature is checked before anything of
// the generation is read, and the content (blobs) of a commit that is not
// signed by a trusted key is not read at all ("content not read", noted;
// the commit and tag failures say why). Every file is size-checked from
// its object header against Options.MaxObjectBytes before it is read
// (CheckSize "size"; the assembled size of split parts is capped while
// reading), and blobs are streamed from the pack (go-git's
// LargeObjectThreshold), never decoded whole into memory.
//
//   - "commit-signature": the commit's gpgsig header is an SSHSIG
//     (namespace "git") by a trusted signer (Options.TrustedKeys, or
//     Options.AllowedSigners applied as git does) over the raw commit
//     object without its gpgsig / gpgsig-sha256 headers — the bytes `git
//     verify-commit` checks (split from the raw object, not re-encoded by
//     go-git, so foreign headers are kept exactly). Unsigned, another
//     key, a bad signature or a non-SSH signature all fail.
//   - "tag", "tag-signature": the annotated tag TagPrefix+gen exists,
//     points at this commit, carries the commit's message, and is signed
//     like the commit (the payload ends where the last signature-marker
//     line starts, as git's parse_signed_buffer decides). A missing tag is
//     a failure: gitops.Repo always writes one (a clone must fetch tags).
//   - "layout", "parts", "object": exactly one of <path>/current.wtxt,
//     current.wtxt.parts/ (reassembled with layout.AssembleFS, every
//     part's size and SHA-256 and the whole file's checked) and
//     current.wtxt.segs/ (the segments layout, Snapd-Layout: segments,
//     rebuilt with layout.ReadSegments — the reader snapd checkout uses —
//     every piece's and segment's size and SHA-256 and every chunk's
//     sha256 and crc32c checked; a failure names the MANIFEST, the piece
//     and line, or the segment file: "layout" for the directory's
//     structure, including files neither the MANIFEST nor the skeleton
//     names, "parts" for content), and readable objects. The WTXT is
//     copied to a temp file (at most two generations' copies exist at a
//     time) and verified as below. Options.Sample does not apply to the
//     segments layout: its segments are in the clone already (noted).
//   - "wtxt/<check>": a plaintext WTXT is verified fully with wtxt.Verify
//     (every profile check, RequireSignature with the trusted keys; the
//     WSUM current.wsum is passed along when present). Each failure keeps
//     the verifier's line, array and chunk. Per-array HMACs are not
//     checked: that needs the secret HMAC key.
//   - "seal/<check>": an age-armored WTXT (detected by its armor header)
//     is verified without decrypting through current.wseal
//     (armor.ParseSeal, armor.Scan of the armored bytes, Seal.Verify with
//     RequireSignature): signature by a trusted key, size and SHA-256 of
//     the armored bytes, armor form, the seal's own Merkle consistency;
//     the seal must be of kind wtxt. "seal/missing" when there is no seal.
//     The plaintext is not checked (noted).
//   - Skeleton layout (layout.FileSkeleton, Snapd-Layout: skeleton; the tensor
//     bytes in an OCI registry, docs/FORMAT.md §6), with Options.Registry
//     (read only: GET and HEAD): "registry" for the gen-NNNNNN manifest,
//     its annotations and config against the skeleton and every blob's
//     presence (oci.Repository.CheckGeneration); then, by default, the WTXT
//     assembled from the skeleton and the blobs is streamed through a pipe
//     into wtxt.Verify ("wtxt/<check>" as for a plain WTXT, plus
//     "wtxt/blob" and "wtxt/skeleton" from the assembler, located at the
//     skeleton's line with array, chunk and segment digest); it is never
//     written to disk. With Options.Sample in (0, 1) only SampleSegments'
//     pick of segments is read (wtxt.CheckSkeletonSample), every skeleton
//     line is checked, and the header's Merkle value and signature are
//     checked on their own; array hashes, sha256_all and fastxor are not
//     recomputed (noted). Without a Registry the generation fails with
//     "registry" (its header is still checked). After retention (collected.go):
//     a manifest the registry answers 404 for (oci.ErrManifestNotFound)
//     makes the generation ContentCollected when a later generation of the
//     walk is ContentPresent, and its skeleton is checked alone
//     (VerifySkeleton: every line, every ch hash present and well-formed,
//     the header's Merkle value and signature; no tensor byte is read) —
//     not a failure unless Options.RequireContent; with no later present
//     generation it is ContentMissing, a "registry" failure. Any other
//     registry answer, and a blob missing under a manifest that is there,
//     stay failures.
//   - "trailer": the commit trailers (Snapd-Gen, -Ts, -Build,
//     -Sha256-All, -Merkle-Prev, -Merkle-This, -Layout) are present and
//     equal the values in the WTXT header (or seal) and the stored layout;
//     the Snapd-Meta trailer, when present, parses, and equals the
//     metadata inside the generation (meta.go): a plaintext WTXT's (any
//     layout but the skeleton's), or the one read through the skeleton
//     (wtxt.ReadSkeletonUserMeta: no attributes array means none, else
//     that array's blobs from the registry). A difference names the keys,
//     never a value. A collected generation whose document's blob the
//     registry no longer has gets a note ("metadata not checked"), not a
//     failure. An age-armored generation's metadata is encrypted (gitops
//     commits no Snapd-Meta trailer for it) and is not compared.
//   - "summary": generation.txt has exactly the values gitops.Repo writes:
//     header values, layout, wtxt_bytes/wtxt_sha256 of the stored (possibly
//     armored) WTXT (the segments layout may omit wtxt_sha256; when
//     present it must match), and <ext>_bytes/<ext>_sha256 for each optional file
//     present and none for an absent one.
//   - "gen-order": gen is strictly greater than the previous commit's.
//   - "chain": merkle_prev equals the previous commit's generation's
//     merkle_this. Values used for the chain and the trailer and summary
//     comparisons are the file's declared (signed) header values — or the
//     seal's, or for a streamed WTXT the WSUM's — so a corrupted body is
//     reported once, where it is, instead of also breaking the next link.
//     When a generation's content cannot be read at all, its trailer
//     values stand in for the next link (noted).
//   - "delta": when current.wtxtdelta (or .parts/) is present, it is
//     applied with wtxt.ApplyDelta to the previous generation's WTXT and
//     the output must equal this generation's WTXT byte for byte (the first
//     differing byte offset is reported; a delta for another base fails
//     with the delta's line 1). Skipped, with a note, when the delta is
//     age-armored, when either generation is armored (no plaintext without
//     the identity), or when the previous generation is outside the walk.
//
// All failures of a generation are collected; the walk never stops at the
// first. Verify returns an error only when it cannot walk (no keys, branch
// or --since not found or --since not on the first-parent chain, an
// unreadable commit, a temp file that cannot be written, cancellation):
// `snapd verify-repo` maps that to exit 2 and failures to exit 1.
//
// # Decisions
//
//   - A gap in generation numbers (gen 5 followed by gen 7) is reported
//     (Report.Gaps, a note) but is not a failure. The daemon may skip a
//     checkpoint (coalesced requests, a generation that was never
//     published), and the Merkle chain is what proves nothing committed
//     was removed: generation 7's signed merkle_prev names generation 5's
//     merkle_this exactly when 6 was never part of the chain. Removing a
//     committed generation from the history breaks the chain check.
//   - The first generation of the walk: with Since it is the anchor (its
//     own content, signatures and tag are verified; its merkle_prev is
//     trusted and its delta, whose base is outside the walk, is skipped).
//     Without Since, the root commit must have a zero merkle_prev to be
//     "first"; a non-zero one (a repository started mid-chain) is reported
//     as an anchor with a note, not a failure — the signatures still bind
//     it to a trusted key.
//   - Keys: a .pub key (TrustedKeys, or a file of bare key lines) is
//     trusted for everything at any time. An allowed_signers file
//     (Options.AllowedSigners) is evaluated as ssh-keygen does: commit and
//     tag signatures (namespace "git") pass exactly when git verify-commit
//     / verify-tag with gpg.ssh.allowedSignersFile would pass them —
//     principals (any listed principal; patterns), namespaces=,
//     valid-after= and valid-before= compared with the committer or tagger
//     time (git's -Overify-time; both in the local time zone unless the
//     option ends in Z), and cert-authority for signatures made through a
//     user certificate the CA signed. WTXT, skeleton and seal signatures
//     carry a key id, never a certificate: they are checked against the
//     keys of the plain lines that allow namespace "file" at the
//     committer time of the generation's commit (which the daemon sets to
//     the generation's meta ts); cert-authority lines never allow them.
//     A line ssh-keygen would skip (an unknown option, an unquoted value,
//     a bad time) makes the file fail to load instead.
//   - Content collected is inferred, not recorded: snapd gc --remote
//     writes nothing to the ledger, so a 404 for a generation's manifest
//     is taken as retention only below a generation whose content is
//     present (retention always keeps the newest). Someone who can delete
//     manifests can thus make older generations look collected; their
//     skeletons, signatures and chain still verify, and
//     Options.RequireContent (verify-repo --require-content) turns
//     collected into a failure where the bytes must be there. A
//     collected generation is held back from Options.OnGeneration until a
//     later present generation (or the end of the walk) decides it.
//   - Encrypted generations never need a secret: the seal is the
//     verify-only evidence; a plaintext seal beside a plaintext WTXT is
//     ignored (noted), an armored WSUM is not used (noted).
package verify
