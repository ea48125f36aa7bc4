// Package gitops publishes snapshot generations to Git: the repository
// layout, one signed commit and tag per generation (Repo), the Git side
// of the layouts (gitops/layout owns the layouts, their names and
// Detect; the split "git-scale" layout for files GitHub would refuse is
// its SplitParts and Assemble), pushers for local, HTTP(S) and SSH
// remotes (Pusher, GitPusher), and, in gitops/queue, the durable resend
// queue.
//
// # Repository layout
//
// Repo writes into a bare repository with go-git, on one branch
// (Config.Branch, default "snapshots"), under one directory (Config.Path,
// default "snapshots"):
//
//	.gitattributes                    (repository root, see Gitattributes)
//	<path>/current.wtxt               the generation's WTXT (single layout), or
//	<path>/current.wtxt.parts/        the split layout: MANIFEST + *.part, or
//	<path>/current.wtxt.skel[.parts]  the skeleton layout (tensor bytes in an
//	                                  OCI registry, Generation.Skeleton;
//	                                  docs/FORMAT.md §6)
//	<path>/current.wtxt.segs/         the segments layout (auto above the split
//	                                  threshold): MANIFEST + *.part
//	                                  (skeleton text) + seg/<hh>/<sha256>.seg
//	<path>/current.wtxtdelta[.parts]  DELTA v2 from the previous generation (optional)
//	<path>/current.wsum               WSUM (optional; required for root_pending)
//	<path>/current.wseal              seal sidecar (optional)
//	<path>/generation.txt             summary, key=value lines
//	<path>/current.diff.svg           picture of the change from the previous generation
//	                                  (optional, Generation.Picture; snapshot/diffsvg;
//	                                  unsigned, derived, not in generation.txt)
//
// The DELTA is committed according to Config.Delta: by default (auto) only
// beside a single-file WTXT, since parts and segments already store exactly
// the changed chunks and a delta beside them would store each change twice.
//
// The names are stable, so `git diff gen-000122 gen-000123 --
// <path>/current.wtxt` is the row-blocked diff: unchanged chunks are
// unchanged lines. Optional files absent from a generation are removed from
// its tree (nothing is carried over from an older generation); other files
// of the previous root tree (a README, CI workflows) are kept.
// .gitattributes marks *.wtxt, *.wtxtdelta, *.wsum, *.wseal and *.part
// `text eol=lf diff`: diffed as text and never converted to CRLF, so a
// checkout is byte-identical even with core.autocrlf=true.
//
// generation.txt holds gen, ts, build, sha256_all, merkle_prev, merkle_this,
// layout (single|split|segments|skeleton), wtxt_bytes and wtxt_sha256 (SHA-256 of
// the whole WTXT file; omitted in the segments layout, whose WTXT is never
// read whole when committed, and whose rebuilt WTXT is checked chunk by
// chunk, then by its signed root; skel_bytes and skel_sha256 of the skeleton file in
// the skeleton layout, followed by oci_repository and oci_manifest), then <ext>_bytes and <ext>_sha256 for each optional file
// present (wtxtdelta, wsum, wseal).
//
// Each generation is one commit whose parent is the previous generation's
// (the branch's first commit has none, or, with Config.BaseBranch, the base
// branch's tip: it then keeps the base's files, merges snapd's rules into
// its .gitattributes, and adds the trailer `Snapd-Base: <base commit>`; see
// base.go), with the message
//
//	snapd: generation 000123
//
//	Snapd-Gen: 000123
//	Snapd-Ts: 2026-01-01T00:00:00Z
//	Snapd-Build: <build>
//	Snapd-Sha256-All: <hex64>
//	Snapd-Merkle-Prev: <hex64>
//	Snapd-Merkle-This: <hex64>
//	Snapd-Layout: single
//	Snapd-Meta: loss=0.41 step=1200   (only with metadata, usermeta.go)
//
// (git trailers: `git log --format='%(trailers:key=Snapd-Gen,valueonly)'`
// reads them; the six before Snapd-Layout are Header.Root's text form,
// wtxt.Root.Fields under RootTrailers, as generation.txt's first six
// lines are under the Root's own keys), plus an annotated tag <TagPrefix><gen> ("gen-000123") with
// the same message. Author, committer and tagger are Config.AuthorName and
// AuthorEmail at the WTXT's meta ts, so a commit is reproducible from its
// inputs. With Config.SigningKey, commit and tag carry an SSHSIG signature
// (namespace "git", gitops/sshsig) that `git verify-commit` / `git
// verify-tag` accept with gpg.format=ssh and an allowed-signers file
// naming AuthorEmail.
//
// A generation with Generation.Resume (a run restarted from generation R's
// checkpoint, resume.go) is committed after a resume record when the
// branch's live chain has generations above R: a signed commit whose
// parent is the abandoned head and whose tree and root trailers are R's
// commit's (so the branch head reads as R), with the subject "snapd:
// resume from generation R (abandons A..H)" and the trailers
// Snapd-Resumed-From (R), Snapd-Resumed-Commit (R's commit) and
// Snapd-Abandoned (A..H, the live generations above R). The abandoned
// commits and tags are not rewritten; a re-used number is tagged with the
// first free of <TagPrefix><gen>-r1, -r2, ... (ResolveGen takes the
// newest). The live chain runs from the head through first parents,
// continuing at Snapd-Resumed-Commit at each record (docs/FORMAT.md
// "Resumed runs").
//
// Commit refuses a generation that is not newer than the branch head
// (ErrGenOrder) or whose merkle_prev is not the head's merkle_this
// (ErrChainBreak), and returns the head unchanged (Result.Existing) when the
// same generation is committed again, e.g. after a crash. Header values come
// from the WTXT's `meta` and `root` lines (ParseHeader; for root_pending,
// from the WSUM via ParseWSUM) or from Generation.Header (needed for an
// age-armored WTXT). Config.Verify, if set, runs before anything is written.
//
// Trees are built from the previous commit's trees: only the entries of
// <path> (and the trees above it) are rewritten, and a blob is written only
// when the repository lacks it. Single files are streamed (hashed, then
// written only if new); see below for parts. New blobs and trees are
// loose objects, except that a Commit adding at least 256 of them (or
// more than 8 MiB before that) writes them all as one pack,
// objects/pack/pack-<sha1>.pack + .idx (version 2, undeltified entries,
// stored zlib; packw.go), installed before the commit that names them: a
// file per object was about half of a dense generation's commit CPU.
// A long run gathers a pack per such generation, and every lookup of a
// new object visits them all: Repo.Maintain (maintain.go), which the
// daemon runs after each successful push (after each commit when there is
// no remote), rolls the smaller packs and the loose objects up with `git
// repack -d -l --geometric=2` once there are more than Config.MaxPacks
// (default 50; the config's git.max_packs), keeping the big first pack and the literal deltas.
// Nothing snapd writes becomes unreachable, except by Repo.Retain
// (retain.go), which the daemon runs after each successful push when the
// config's retention.repo is set: the newest K pushed generations (and
// everything not pushed) stay, the K-th becomes the shallow boundary,
// older generation tags are deleted and git repack -a -d / git prune drop
// the rest. History walks (Log, ResolveGen, a resume) stop at the
// boundary; a generation below it is ErrPruned.
//
// # Split ("git-scale") layout
//
// GitHub rejects files over 100 MiB. Config.Layout selects: "single" (one
// file, any size), "split" (always parts), "segments" (always the
// segments layout, below) or "auto" (the default: one file up to
// SplitThreshold, default PartLimit; above it the segments layout, or
// parts for an age-armored WTXT, which has no structure to cut into raw
// segments). A delta or sidecar larger than SplitThreshold is split too
// unless the layout is "single". A split file is a directory <name>.parts/ of part files of at
// most PartLimit bytes (default 48 MiB, at most MaxPartLimit = 95 MiB)
// plus a MANIFEST:
//
//	WTXT-PARTS 1 bytes=<total> sha256=<hex64 of the whole file> parts=<n>
//	<part name> <size> <sha256 hex64>        one line per part, in order
//
// Concatenating the parts in MANIFEST order reproduces the file byte for
// byte; layout.Assemble / AssembleFS / Repo.WriteWTXT do so and check every part's
// size and SHA-256 and the whole file's. The MANIFEST has a single
// canonical form (decimal without leading zeros, lowercase hex, single
// spaces, final LF); part names match [A-Za-z0-9_.-]+\.part, do not start
// with '.', are unique and at most 200 bytes, so a MANIFEST cannot name a
// file outside its directory.
//
// A WTXT (input starting with the line "WTXT 1") is cut at line structure
// only:
//
//	0000-header.part           every line before the first `arr` line
//	<A>.head.part              the array's `arr` line (+ its `idx` line)
//	<A>.c<ix6>.part            chunks ix .. ix+K-1 (ix a multiple of K)
//	<A>.c<ix6>.l<k7>.part      base64 lines k.. of one chunk larger than a part
//	9999-trailer.part          the optional `audit` line and `endwtxt`
//
// <A> is the array name with bytes outside [A-Za-z0-9_.-] replaced by '_',
// cut to 64 bytes, a leading '.' replaced by '_', then '.' and the first 8
// hex digits of SHA-256(name). K = max(1, (limit-512) / E) where E bounds
// the encoded size of the array's first chunk (its `ch` line + lines×79 +
// `endch` + `endarr`); `endarr` ends the array's last part. A chunk that
// does not fit the current part (odd geometry) starts a part named after
// its own ix; a chunk cut by lines is followed by a new part. Since K
// depends only on the chunk geometry and the part names only on array name
// and chunk index, a chunk run whose bytes did not change gives a part with
// the same name and content (the same Git blob) in the next generation: a
// generation's new blobs are the header part, the head parts of changed
// arrays (their `arr` line holds sha256/hmac), the runs holding changed
// chunks, MANIFEST and generation.txt. Repo reuses the previous tree's blob
// for every part whose (name, size, SHA-256) equals an entry of the previous
// MANIFEST, without hashing it for Git or writing it, so commit cost grows
// with the changed bytes (plus one SHA-256 pass over the file).
//
// layout.SplitParts rejects (ErrParts) structurally broken WTXT input: lines over 64
// KiB, no final LF, ch lines out of order, base64 line counts that differ
// from `lines=`, data after `endwtxt`, two arrays whose part names collide.
// Any other input (a DELTA, an age-armored file) is cut into
// blob.<n6>.part files after the last LF that fits in a part, or exactly at
// the limit when a part would hold no LF.
//
// # Segments layout
//
// With Config.Layout "segments" (config git.layout: segments), or "auto"
// above SplitThreshold, a plain WTXT is stored as its skeleton (formats/wtxt: every line but the base64
// lines, plus one `seg` line per segment) and the segments' raw bytes:
//
//	current.wtxt.segs/MANIFEST             the pieces, as for split parts
//	current.wtxt.segs/0000-header.part     skeleton lines before the first arr
//	current.wtxt.segs/<A>.head.part        arr (+ idx) line
//	current.wtxt.segs/<A>.s<ix6>.part      64 seg blocks (seg, ch, endch
//	                                       lines) from the segment whose first
//	                                       chunk is ix; the last ends with endarr
//	current.wtxt.segs/9999-trailer.part    audit, endwtxt
//	current.wtxt.segs/seg/<hh>/<hex64>.seg one raw segment per distinct SHA-256:
//	                                       a blob, or a directory of pieces
//	                                       p000000, p000001, ... (see below)
//
// Segments are runs of whole chunks of one array of about
// Config.SegmentSize raw bytes (default 64 KiB, cut greedily from chunk 0,
// so the boundaries repeat while the geometry does). Commit has the
// layout (gitops/layout's Segments, writing into the commit's tree and a
// seg/ store of Git blobs) run wtxt.SplitIndexed: the structure from wtxt.ReadIndex, every new segment
// decoded and checked (base64 shape, parity, sha256, crc32c) and stored
// as a blob; a segment whose chunks' ch lines equal those of a segment of
// the generation this Repo committed last (wtxt.SegmentKey) is neither
// read nor decoded, and its blob comes from the previous tree (the bytes
// committed are those its ch lines name). Only new segments, the pieces
// holding changed ch lines, the header and changed arr pieces, MANIFEST,
// generation.txt and the trees above them are new objects, and segments
// hold raw bytes (no base64), so a generation costs about the changed
// chunks' raw size in the repository. git diff between two generations'
// *.part shows the changed ch lines; .gitattributes marks *.seg and the
// pieces *.seg/p* -text -diff -delta (binary, and no delta search when
// git packs them: it finds nothing in float bytes and costs CPU).
//
// A bare server reads no committed attributes, so the pack itself says
// it too: when a Commit writes a pack (packw.go), raw bytes go in as
// literal deltas, OFS_DELTA entries whose instructions only insert the
// blob's own bytes, 127 at a time (0.8% larger), against a small blob
// written earlier in the same pack. git reuses a delta it finds stored
// when the base is in the same packing list, so neither the pushing
// git nor pack-objects on a server that serves a clone (or repacks
// without -f) searches float bytes for deltas, and the cloning
// index-pack hashes them in its threaded phase. The base must therefore
// travel with the blob: a piece (below) has its own base blob beside it,
// b000003 for p000003, whose content names the piece ("blob <id>"), so it
// is new exactly when the piece is (a thin push sends both) and is in
// every tree that holds the piece (a clone of any generation gets both).
// A segment stored as one blob (at most SegmentPiece bytes) has no
// directory for a base; it is a delta against the root .gitattributes
// blob, which a thin push does not send (git then sends the blob whole):
// only pieces first written by a generation that reached the remote as a
// whole pack keep that delta. Reading deltas costs go-git a second pass
// and more SHA-1 per delta; GitTreeFS reads blob contents through one
// `git cat-file --batch` child instead (WriteWTXT, snapd checkout,
// verify-repo), which applies deltas in C and does not hash (the chunk
// hashes are checked anyway), and falls back to go-git when git cannot
// run.
//
// A segment larger than Config.SegmentPiece (default 16 KiB) is stored as
// a directory <hex64>.seg/ of raw pieces p000000, p000001, ... of
// SegmentPiece bytes each (the last one shorter), each with its base
// blob b000000, b000001, ... (above; readers ignore them, verify-repo
// checks their IDs); concatenated in name order the pieces are the
// segment. A change to a few rows of a 64 KiB chunk
// then stores the pieces holding those rows and a small tree, not the
// whole chunk: the pieces that did not change are blobs the repository
// has. (Git finds them by content, so git push must not use the sparse
// walk, which looks for known objects at the same paths only; GitPusher
// passes -c pack.useSparse=false.) A segment of at most SegmentPiece
// bytes, and every segment of a generation committed before pieces
// existed, is a single blob; the reader takes both forms.
//
// layout.ReadSegments is the one reader (WriteWTXT, AssembleSkeletonFS,
// gitops/verify): in one goroutine, one file at a time, the MANIFEST, the
// pieces in order (sizes and SHA-256 checked) fed to wtxt.Assemble, which
// reads each segment as its seg line comes (size from the blob's header
// first, or its pieces in order, a missing, empty or surplus piece or one
// past the segment's size refused; every chunk's sha256 and crc32c, the
// segment's length and digest), so memory does not grow with the
// generation; a failure is a *SegmentsError naming the MANIFEST, the piece
// and line, or the segment at fault (Layout set for structure: MANIFEST
// missing or malformed, e.g. naming a path outside the directory, or an
// entry that is not a file). Through GitTreeFS it also passes the
// segments named by the skeleton text read so far, ahead of the
// assembler, to the file system (Prefetch), which keeps up to 64 of their
// blobs requested from git cat-file ahead of the one being read, so git
// is never waiting for the next request (catfile.go); what is read is
// checked all the same. An age-armored WTXT has no structure to
// split and is stored as split parts.
//
// # Pushing
//
// A Pusher publishes one generation (PushRequest: branch, commit, tag).
// GitPusher (NewPusher) runs the git CLI, which streams objects with
// memory bounded independently of the generation's size (go-git's push
// built the pack in memory and its file transport could wait for ever on
// an orphaned index-pack). go-git still reads the local history. Remotes:
// a local path or file:// (no credentials), http(s):// (Basic auth with
// Username, default "git", and a token read at every push from TokenFile
// or the environment variable TokenEnv; URLs with a password are
// refused), or ssh:// / user@host:path (SSHKeyFile, optional passphrase
// from SSHPassphraseEnv via an askpass program, SSHKnownHostsFile,
// StrictHostKeyChecking=yes). Secrets reach git only through its
// environment (a credential helper that prints two environment
// variables; GIT_SSH_COMMAND names files, never secrets); the user's
// credential helpers, askpass programs and GIT_* variables are not used,
// prompts are off.
//
// Push first runs git ls-remote for the branch and tag: if the branch
// already holds the commit (a lost acknowledgement) it only completes the
// tag; if the remote head is not an ancestor of the commit in the local
// history it fails with ErrDiverged and sends nothing. Then one git push
// --porcelain --progress <commit>:refs/heads/<branch> [tag:tag]. A push
// whose commit is a child of what the same pusher last pushed (or last
// listed) skips the listing: one git push --atomic, one connection; a
// refusal of it (the remote moved; porcelain "[rejected]" lines classify
// it as ErrDiverged, whatever the user's advice settings) sends nothing,
// tag included, and Push lists and decides as above. A remote that does
// not take --atomic is listed before every push. It never
// force-pushes, and it never reads the branch ref a concurrent Commit
// rewrites (the commit is pushed by hash). PushRequest.Progress, when set,
// hears each phase (ls-remote, rev-list, push) with its kill limits and
// the estimated bytes to send, and each new state of git push's "Writing
// objects: p% (n/total), size" line (PushProgress).
//
// Every git child runs through internal/gitexec: in its own process
// group (Setpgid; Pdeathsig kills git if the daemon dies), without
// snapd's GIT_* variables, with a capped stderr tail. It is killed, the
// whole group with kill(-pgid), when the context ends (daemon shutdown),
// when it exceeds Timeout + (on-disk bytes of the objects to send, from
// git rev-list --disk-usage) / MinRate (defaults 5m and 1 MiB/s), or when
// its output (stderr, where --progress writes, and stdout) shows nothing
// new for Stall (default 2m). A kill by timeout or watchdog is logged and returns a retryable error wrapping ErrTimeout;
// the queue stops as needs-attention after Options.MaxTimeouts (default 3)
// consecutive ones. The group id is recorded in <repo>/snapd-push.pgid
// while git runs, so a daemon restarted after kill -9 kills helpers the
// old one left (only processes of that group started no earlier than its
// leader). After a failed push to a local remote, the quarantine
// directories the attempt created (objects/incoming-*,
// objects/tmp_objdir-*, objects/pack/tmp_pack_*) are removed. A server
// cleans its own quarantine when the connection drops (git receive-pack
// removes it on exit or signal); only a receive-pack killed with SIGKILL
// on the server leaves objects/tmp_objdir-incoming-* there for its
// operator (or git gc, after gc.pruneExpire) to remove.
//
// Repo sets pack.window=0 and pack.compression=0 and writes its loose
// objects with zlib stored blocks (written directly, loose.go; trees only
// when new): changed parts are whole chunks, a thin
// pack's delta bases are appended in full by the receiver (index-pack
// --fix-thin), and base64 deflates only to ~75%, while inflating and
// deflating every new object in the daemon, pack-objects and the
// receiver's index-pack was most of the Git CPU (scripts/bench-git.sh,
// 50 MB model, 2% uniform change: window 10 cost 1.8x the first push's
// CPU for the same remote growth; level 0 instead of 1 cut the
// daemon's CPU per generation from 3.1 to 2.0 s for 1.3x the remote
// growth; the segments layout's raw segments do not compress anyway).
// The git push child also gets -c pack.useSparse=false (see "Segments
// layout") and -c pack.threads=1, pack.windowMemory=32m,
// pack.deltaCacheSize=16m, core.deltaBaseCacheLimit=16m,
// core.bigFileThreshold=16m, core.packedGitWindowSize=16m and
// core.packedGitLimit=128m (pushMemoryLimits), so its memory does not
// grow with the generation beyond the packs it maps: a push raises
// core.packedGitLimit to the bytes it sends plus 128 MiB (pushLimits),
// since it reads a generation's objects in tree order, not pack order,
// and a smaller bound remapped a window for nearly every object. git does not pass them to a local remote's
// receive-pack, which the daemon runs itself: it gets them on its
// command line (--receive-pack), with receive.unpackLimit=1 (the pack
// is kept as sent, not deflated again into loose objects) and
// receive.autogc=false (localReceiveOptions). A server's receiving side
// follows its own configuration.
//
// Errors are *PushError with Kind ErrRetryable (network, timeouts, HTTP
// 5xx/408/429, unknown errors) or one that needs a person: ErrAuth (HTTP
// 401/403, unreadable or empty token, SSH authentication or host key
// failure), ErrDiverged (remote ahead with foreign commits, non-fast-forward,
// tag exists with another value), ErrRejected (hook or protected branch,
// repository not found, other 4xx), ErrLocal (commit/tag missing locally).
// NeedsAttention tells the two apart.
//
// # Resend queue (gitops/queue)
//
// On disk, in the queue directory:
//
//	jobs/<url.PathEscape(branch)>/<gen, 20 digits>.json   one file per job
//	hold.json                                             present while stopped
//	pushing.json                                          the attempt in progress (queue.Pushing)
//
// A job file is one JSON object and LF: {"branch", "gen", "commit" (40
// hex), "tag", "enqueued", "attempts", "timeouts" (consecutive ErrTimeout failures, omitted when
// 0), "last_error", "next_attempt", "publish"}; "publish" (queue.Publish:
// work done before the push, e.g. a registry upload and the commit) holds
// "kind", "wtxt" (the file held in hold/), "bytes", "header",
// "requested", "sent" and "state", the Publisher's own record of its
// progress (a job file from before "state" kept it as keys of publish;
// they load as state); unknown fields are rejected and the file name must
// match gen. Every write
// goes through internal/atomicfile (temp file, fsync, rename, fsync dir);
// stale temp files are swept at Open. Zero-padded names make the directory
// order the generation order. hold.json ({"branch", "gen", "kind", "error",
// "since", "checked"}) records a failure that needs a person; while it
// exists nothing is pushed, except that an authentication failure (or a
// stop after Options.MaxTimeouts consecutive timeouts, kind "git timed
// out") is re-checked with one push attempt every Options.AuthRecheck (default 5m)
// so the queue resumes by itself once the credential is fixed ("checked"
// is the last re-check). Retry removes it and clears every backoff; Drop removes a job
// (and the hold if it was about that job). Since the state is all in files,
// Status, List, Retry and Drop work from another process (the CLI) while
// the daemon runs; the running queue notices within PollInterval.
//
// pushing.json names the job, attempt, phase (publish, ls-remote,
// rev-list, push), since when, the phase's timeout and stall limits and
// git's progress; Run rewrites it at each phase and progress state by
// rename without fsync (it describes the running process only), removes it
// when the attempt ends, and Open removes one a killed process left;
// Status reports it (pipeline.ReadStatus drops it when no daemon runs).
//
// Run pushes the head job of each branch when due; success deletes the job
// file, a retryable failure increments attempts and sets next_attempt =
// now + a delay drawn from [d/2, d) with d = BaseDelay×2^(attempts-1)
// capped at MaxDelay, and a failure that needs a person writes hold.json.
// A job is deleted only after Push returned nil, so a crash can only repeat
// a push, and a repeated push of a commit the remote already has is
// detected by GitPusher and sends nothing: each generation is applied on
// the remote once.
package gitops
