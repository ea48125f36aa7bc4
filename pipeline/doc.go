// Package pipeline is the snapd daemon: it turns snapshot requests from
// the WAL into chained WTXT generations in a local ring and hands each to
// its Publisher, which commits it to Git (or leaves it to a resend-queue
// job that uploads it to a registry first and then commits); the resend
// queue pushes the commits. It owns every channel between its stages;
// only cmd/snapd wires configuration, keys, the format registry, the Git
// repository, the Publisher and the queue into it (Config, Deps).
//
// # Stages
//
//	wal.Listener ──rec──▶ admit ──▶ prepare ──▶ build ──▶ finish
//	 (fsnotify+poll)     policy    pin+decode   encode     publish + enqueue,
//	                     bound                  [armor]    WAL outcome, ring trim
//	                                            [WSUM]
//	                                            delta
//	                                            ring+state
//
// Each stage is one goroutine reading one channel and writing the next;
// the channels are unbuffered or hold one item, so a slow stage stops the
// ones before it (back-pressure), and memory is bounded by a few items,
// whose array data is memory-mapped from the source, never copied. Every
// WAL record travels through every stage in log order — duplicates,
// coalesced and failed ones just pass through — so the last stage can
// complete them in the order wal.Consumer requires.
//
// admit holds up to Config.QueueMax requests that will be snapshotted.
// Beyond that, PolicyBlock stops reading the WAL (the requests wait there,
// durably) and PolicyCoalesce replaces the newest waiting request by the
// arriving one; the replaced request is completed in the WAL as failed
// with "coalesced: superseded by the request for gen N", logged and
// counted — never silently dropped. (The admission stage holds at most
// 4096 such pass-through items before it blocks as well.) A request whose
// generation is already done, or that already failed at the same log
// position, is skipped (redelivery after a crash).
//
// prepare pins the generation in the generation store when the source is
// an entry of STATE_DIR/gens or lies inside a directory entry
// (snapshot.GenStore.GenOf, GenStore.Pin: a reclaim in any process keeps
// the whole entry), then decodes it: a file is memory-mapped, its format
// sniffed (formats.Registry.Detect: magic bytes, then extension) and
// decoded; a directory is read as one snapshot by formats/sharddir (a
// Hugging Face shard index and its shards, or every checkpoint file, each
// opened beneath the directory, regular files only), or by formats/dcp
// when it holds .metadata or *.distcp files (a torch.distributed.checkpoint
// of any world size, every tensor assembled whole; until torch has written
// .metadata and every item file it names, the source is retried like a
// transient error, never half-read). The source is
// opened without blocking and judged by the opened descriptor
// (internal/safeopen): a FIFO, device or socket — also one swapped in for
// a checkpoint after a check — fails the request at once. Decoders and
// the encoder read the mapping only through snapshot.Guarded, so a source
// truncated while mapped fails its generation (snapshot.ErrSourceFault,
// naming the file and offset) instead of killing the daemon with SIGBUS.
// A generation outside 1..snapshot.MaxGen fails here too. Sources elsewhere
// are read as they are; the trainer must keep them until the request is
// done. A relative source is relative to the daemon's working directory.
//
// build encodes the WTXT (meta gen from the request; meta ts = the
// request's ts, truncated to seconds, so re-encoding after a crash gives
// the same bytes; schema/build/host/cuda from Config; signature, HMAC and
// merkle_prev = the chain head's merkle_this), optionally armors it with
// age (Config.Recipients) and writes a WSEAL seal, writes the WSUM when
// streaming, makes the DELTA v2 against the chain head's plaintext (only
// when it is smaller than the WTXT: wtxt.PlanDelta knows its size from
// the two chunk indexes, so a dense update writes none) and persists the
// new chain head. build is the only writer of the chain
// head; the pin is released and the mapping closed right after it. The
// ring's files (layout, armor and seals, the WTXT's commit in the
// background while the delta is built, removal, trim) are package
// pipeline/ring's (ring.Writer); build.go only orders the steps. The
// check for NaN/±Inf the generation introduces (nonfinite.go) is decided
// from the NaN/±Inf counts the encoder takes of every float array and
// the chain state keeps of the head's (no file is read for an array
// that holds some in one generation only); an array holding some in
// both, or every array when the head's counts are not known (a state
// file from before they were kept), is compared on the changed chunks of
// the two files beside the delta once the WTXT is committed (its time
// goes into the "delta" stage). The result goes into the chain state.
// The diff picture (picture.go) reuses the delta plan's indexes and draws
// densely changed arrays from a bounded sample. The build stage runs one
// generation ahead of finish (the built channel's depth), so generation
// N+1 is encoded while N is committed.
//
// finish hands the generation to the Publisher (Deps.Publisher;
// publish.go) and enqueues what it leaves (Deps.Queue): GitPublisher
// commits the ring files to Git (Deps.Repo; the Header is passed
// explicitly, so armored files commit too) and the commit's push is
// queued; OCIPublisher leaves one queue job (kind "oci-generation") that
// commits the skeleton once the tensor bytes are in the registry: the
// build pushed them (ocidirect.go: encoded straight to the skeleton and
// segments, no ring WTXT), or, when the registry did not take that push,
// the job uploads the ring WTXT's segments first.
// Both commits go through one function (commitGeneration, i.e.
// gitops.Repo.Commit). finish then records the outcome in the WAL (done or
// failed with the error) and trims the ring. A publish failure does not
// fail the request: it is logged, counted and kept in last_error, and the
// next start publishes again every ring generation the Publisher finds
// unpublished (Publisher.Recover).
//
// The local repository's packs are bounded (gitops Repo.Maintain, a
// geometric git repack above gitops.Config.MaxPacks): PushObserver.
// AfterPush (the queue's queue.Options.AfterPush) runs it after every
// successful push once the queue removed the job, in the queue's
// goroutine, so no push of this daemon reads the packs while they are
// replaced and no wait for "pushed" waits for it; without a
// queue the finish stage runs it after each commit. A failed repack is
// logged as a warning and leaves the repository as it was. Before it,
// with Config.Retention.Repo, the observer trims the local history to
// the newest pushed generations plus the queue's pending pushes (gitops
// Repo.Retain; retention.go), and the finish stage reclaims STATE_DIR/gens
// after each done generation by `snapd gc`'s rule (Retention.Gens).
//
// # Pull requests
//
// With Deps.PullRequest (the github section of the config), every
// successful push is followed by a review. PushTracker wraps the resend
// queue's Pusher: when a push succeeds it records the commit in
// STATE_DIR/pull-request ("pushed") before the queue deletes the job, so
// a crash in between repeats the push (a no-op) and never loses the
// review. A goroutine then opens or updates the pull request from the
// generations branch (Repo's) to PullRequest.Base (review.Client
// .EnsurePullRequest; title and body stay the same across generations)
// and, once GitHub shows the pushed commit as the pull request's head
// (it updates pull requests asynchronously), posts the review of that
// head (review.Client.ReviewPullRequest: verification with the daemon's
// own public and HMAC keys, the Merkle chain against the base version,
// changed rows, thresholds; idempotent per head commit). Only the newest
// pushed generation is reviewed: pushes that arrive during a review
// coalesce. The result is recorded as "published"; at start, a pushed
// commit not yet published is reviewed. Failures (network, 401, GitHub
// not yet showing the commit) are retried (backoff.Retry) with backoff
// from RetryBase doubling to RetryMax, counted in
// snapd_failures_total{stage="github"}, written to last_error and
// STATE_DIR/pull-request, and logged by backoff.LogLimiter's rule (the
// first of a streak, a new error, else at most one a minute). Tokens are
// never logged.
//
// # Chain rule
//
// Generations enter the chain in request order and only upwards. A
// request for a generation newer than the head is chained to the head:
// when it is not head+1 (a gap — normal with coalescing or after failed
// requests) that is logged at warn level and counted in
// snapd_chain_gaps_total; merkle_prev always names the head's
// merkle_this, and the delta is made against the head. A request for a
// generation at or below the head fails with ErrNotNewer ("a chain never
// goes backwards") unless that generation is in the ring: then it is a
// redelivery whose outcome a crash lost, and it is done without
// rewriting anything. A failed request (corrupt or unknown source,
// missing file) is recorded as failed and does not touch the chain.
//
// Errors are permanent (recorded as failed) unless they are transient
// I/O conditions — ENOSPC, EDQUOT, EIO, EAGAIN, EMFILE, ENOMEM, ... — which
// are retried in place with exponential backoff (Config.RetryBase ..
// RetryMax), each attempt logged (rate-limited), counted and written to
// last_error. The failing request holds the line: later ones wait.
//
// # Sharded jobs
//
// With a RankPublisher as Deps.Publisher the daemon is one node of a
// sharded job (rankstage.go): every request must be one rank's shard
// (wal.Request Rank, WorldSize). admit never coalesces (a full queue
// holds requests in the WAL); prepare decodes the shard, or skips it
// when its rank part is already in STATE_DIR/ranks/parts (a redelivery);
// build converts it to the rank part (formats/wtxt/ranks EncodePart; no
// chain, no ring); finish pushes the part to the registry
// (RankPublisher.Publish: retried with capped backoff until it is in or
// the daemon stops) and only then records the outcome, so a kill -9
// redelivers the request and the re-push uploads only what is missing.
// A part the registry refuses (wrong world size, a rank claimed by
// another shard, another chain) fails the request (stage "publish").
// The committer (RankCommitter) commits each generation once all W rank
// manifests are in the registry.
//
// # State directory
//
//	STATE_DIR/
//	  lock            OFD write lock (fcntl) held by the daemon; contains its pid
//	  state           chain head (JSON, atomic): version, gen, gen_text,
//	                  prev_gen, ts, build, sha256_all, merkle_prev,
//	                  merkle_this, updated, generations
//	  last_error      the last failure (JSON, atomic): time, gen, stage, message
//	  wal/            request log, cursor, outcomes (package wal)
//	  gens/           the generation store the trainer publishes into;
//	                  reclaimed after every done generation when
//	                  Config.Retention.Gens is set (retention.go)
//	  keys/           generated key set (private files 0600) unless configured
//	  ring/           finished generations (below)
//	  repo/           local bare Git repository (gitops); with a resend
//	                  queue and Config.Retention.Repo, shallow: the newest
//	                  pushed generations plus all not yet pushed
//	  push-queue/     resend queue (gitops/queue), when a remote (or
//	                  store.oci) is configured; hold/ keeps a hard link to
//	                  the WTXT (or skeleton) of each generation still to be
//	                  uploaded or committed
//	  oci-segments.cache  the registry layout's segment cache (0600;
//	                  ocidirect.go), rewritten after every push
//	  oci-stats.json  registry upload totals and the last generation's
//	                  upload (OCIPublisher; JSON, atomic)
//	  pull-request    pull-request step (JSON, atomic): newest push, newest
//	                  review, last failure (Deps.PullRequest only)
//	  review-tmp/     versions fetched for a review (emptied at start)
//	  ranks/          a node of a sharded job: parts/ (rank parts converted
//	                  and not yet in the registry), committer.json (the
//	                  committer's RankStatus, atomic)
//
// # Ring
//
//	ring/gen-NNNNNN.wtxt               the WTXT (age armor when encrypting)
//	ring/gen-NNNNNN.wtxt.wseal         its seal (encrypting only)
//	ring/gen-NNNNNN.wtxtdelta          DELTA v2 from the previous chained generation
//	                                   (absent when not smaller than the WTXT)
//	ring/gen-NNNNNN.wtxtdelta.wseal    (encrypting only)
//	ring/gen-NNNNNN.wsum               WSUM (streaming only; + .wseal when encrypting)
//	ring/gen-NNNNNN.diff.svg           picture of the change from the chain head (picture.go;
//	                                   not when encrypting or Config.NoPicture), committed as
//	                                   current.diff.svg
//	ring/.plain/gen-NNNNNN.wtxt        encrypting only: plaintext of the chain head,
//	                                   0600 in a 0700 directory, the base of the next
//	                                   delta; removed when the next head is persisted
//	ring/gen-NNNNNN.wtxt.skel          instead of all of the above, a generation the
//	ring/gen-NNNNNN.oci                build pushed to the registry (OCIPublisher above
//	                                   its threshold, ocidirect.go): its skeleton
//	                                   (written by oci.PushSnapshotFile through
//	                                   internal/atomicfile, not FS) and the record of
//	                                   its manifest and header (JSON)
//
// Every file — WTXT, armored copy, WSUM, delta, seals, and the chain
// state — is written through FS (= ring.FS; default OSFS: temp file,
// fsync, rename, fsync of the directory), so no partial file is ever
// visible under its final name and an injected fault (a full disk)
// reaches every one of them. The commit point of a generation is the state
// file: ring entries newer than the persisted head are half-written and
// removed at start. The ring keeps Config.RingKeep generations; trimming
// never removes the head nor a generation not yet acknowledged in the
// WAL.
//
// # Recovery (New)
//
// Take the lock (ErrLocked names the holder's pid), open the WAL consumer
// (which repairs torn tails), sweep temp files of the state dir and ring,
// remove stale pins of dead daemons, remove half-written ring entries and
// stale plaintext copies. Start then hands the ring's generations up to
// the chain head to Publisher.Recover (committed again, or queued again,
// when missing) and the listener resumes at the WAL cursor: requests whose
// outcome was lost are delivered again and recognized.
//
// # Lifecycle
//
// New(cfg, deps), Start(ctx), Close(ctx). Close cancels the stages: the
// generation in flight is abandoned cleanly (temp files removed, pin
// released, request left pending in the WAL and handled after a restart);
// a Git commit in progress is finished. Close waits for every goroutine
// it started (listener, stages, queue runner, pull-request step, metrics
// server; a review in progress is abandoned and done again at the next
// start). Reload
// swaps keys, meta and writer options, ring size and queue policy for the
// next request (SIGHUP in `snapd run`).
//
// # Metrics
//
// On Deps.Metrics (never the global registry), served with /healthz at
// Config.MetricsAddr: snapd_requests_total{result=done|failed|duplicate|
// coalesced}, snapd_snapshots_total, snapd_bytes_total{kind=source|wtxt|
// delta}, snapd_stage_seconds{stage=prepare|encode|armor|delta|state|git},
// snapd_queue_depth, snapd_last_generation, snapd_failures_total{stage},
// snapd_retries_total{stage}, snapd_chain_gaps_total,
// snapd_last_success_timestamp_seconds, snapd_push_enqueued_total,
// snapd_pull_request_reviews_total{event} (stage "github" in
// snapd_stage_seconds and snapd_failures_total).
// Pushes, through the PushObserver in Deps.Pushes that wraps the queue's
// Pusher: snapd_pushes_total{result=done|failed},
// snapd_push_duration_seconds, snapd_last_push_success_timestamp_seconds,
// snapd_request_to_pushed_seconds (from the request's ts; generations
// recommitted after a restart are not observed there); read from the queue
// directory at each scrape: snapd_push_pending, snapd_push_needs_attention,
// and from its pushing.json snapd_push_in_progress,
// snapd_push_in_progress_started_timestamp_seconds and
// snapd_push_in_progress_bytes_sent (0 when no attempt runs).
// Every labelled counter has its series at 0 from the start.
//
// /healthz answers 200 "ok gen=N", or 503 "unhealthy: REASON" when the
// daemon is stopped, a request admitted more than Config.StuckAfter ago is
// not done, the push queue needs attention, or its oldest job was enqueued
// more than StuckAfter ago.
//
// Each stage logs "stage started" and "stage finished" (with its duration)
// at info; each successful push logs "pushed".
//
// # Status
//
// ReadStatus reads all of the above from the files, without locking or
// modifying anything (the push queue is opened with queue.Options.Shared,
// which leaves the daemon's temp files alone), so `snapd status` works with
// or without a daemon.
package pipeline
