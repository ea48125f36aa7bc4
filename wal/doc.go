// Package wal is snapd's request log: the training loop appends one ASCII
// line per "snapshot requested" in microseconds and forgets about it; the
// daemon consumes the lines in order, at least once, and handles each
// generation once.
//
// # State directory
//
//	STATE_DIR/                 --state-dir, default ./.snapd
//	  wal/                     the WAL directory (this package)
//	    00000001.wal           segment 1 (sealed: ends with the seal marker)
//	    00000002.wal           segment 2, the active one (mode 0644; 0664/0660 group-shared)
//	    cursor                 consumer position, replaced atomically
//	    outcomes.log           done/failed per generation, append + fsync
//	    consumer.lock          flock held by the running consumer
//	    .snapd-tmp-*           temp files of atomic writes (swept at open)
//	  gens/                    generations directory (snapshot.GenStore)
//	    gen-000123.safetensors a published generation (file or directory)
//	    .pins/ .abandoned/ .lock  pins and markers (see snapshot/genstore.go)
//
// # Request line (version 1)
//
// One line per request, printable ASCII, at most MaxLineSize (4096) bytes
// including the newline, fields in this order separated by one space:
//
//	snapreq/1 gen=<G> ts=<T> by=<R> src=<S> crc=<C>\n
//	snapreq/1 gen=<G> ts=<T> by=<R> rank=<K> world_size=<W> src=<S> crc=<C>\n
//	snapreq/1 gen=<G> ts=<T> by=<R> resumed_from=<F> src=<S> crc=<C>\n
//	snapreq/1 gen=<G> ts=<T> by=<R> [resumed_from=<F>] meta=<M> src=<S> crc=<C>\n
//
//	G  generation: canonical decimal (no sign, no leading zeros),
//	   1..MaxGen = 999999999999999999 (at most 18 digits). WTXT writes
//	   meta gen as zero-padded decimal that snapd parses as an int64;
//	   every value up to MaxGen round-trips, and 2^63-1 (which would end
//	   a chain: no generation can follow it) and above are refused.
//	   Writers (Writer, Append, `snapd request-snapshot`,
//	   scripts/snapd_trainer.py) refuse other values; the parser reads
//	   any canonical uint64 so that the daemon can record such a line
//	   from another tool as failed instead of skipping it as corrupt.
//	T  request time: Unix nanoseconds, canonical decimal int64 >= 0
//	R  requester: 1..64 of [A-Za-z0-9._:@/+-] (e.g. "py:4711", "cli:4711")
//	S  source path (the published generation), 1+ bytes, percent-encoded:
//	   bytes <= 0x20, >= 0x7F and '%' become %XX (uppercase hex); no other
//	   byte may be escaped. S therefore contains no space, and the last
//	   field boundary is unambiguous.
//	C  CRC-32C (Castagnoli) of every byte before " crc=", 8 lowercase hex
//	K, W  (both or neither) rank K of a generation written by W
//	   ranks: canonical decimals, 1 <= W <= MaxWorldSize (65536),
//	   0 <= K < W. Lines without them, every line written before, are
//	   ordinary requests (Request.WorldSize 0).
//	F  (optional, ordinary requests only) the run restarted from
//	   generation F's checkpoint: canonical decimal, 1 <= F < G
//	   (Request.ResumedFrom; docs/FORMAT.md "Resumed runs"). A reader
//	   older than the field skips such a line as corrupt, never as an
//	   ordinary request.
//	M  (optional) the generation's metadata (Request.Meta,
//	   snapshot.UserMeta; on a rank request that rank's part's, which
//	   the committer requires to be every rank's of the generation): its
//	   canonical JSON (at most 2048 bytes, keys sorted, no white space,
//	   printable ASCII; docs/FORMAT.md "Generation metadata"),
//	   percent-encoded as S is (so a space is %20 and '%' is %25). The
//	   parser refuses a value that is not canonical. A reader older than
//	   the field (snapd before metadata), or older than metadata on rank
//	   requests, skips such a line as corrupt: upgrade the daemons before
//	   the trainer attaches metadata.
//
// Example:
//
//	snapreq/1 gen=123 ts=1760000000000000005 by=trainer:4711 src=/data/gens/gen-000123.safetensors crc=2194d071
//
// The encoding is canonical: a line parses only if re-encoding it yields
// the same bytes (FuzzParseLine checks this). "snapreq/1 gen=" can only
// occur at the start of a record, which the reader uses to resynchronize.
//
// # Segments and appends
//
// Segments are named %08d.wal (more digits past 99999999), numbered from 1.
// The active segment is the highest-numbered one that is not sealed. A
// segment is sealed when its last line is the seal marker
//
//	snapseal/1\n
//
// or when its owner-write bit is clear (the only seal before the marker;
// still written by a consumer that owns the segment, and honoured by
// everyone, so WALs and appenders of either kind work together).
// Appenders (Go Writer, scripts/snapd_trainer.py, any number of
// processes) open the segment read-write with O_APPEND and do, per
// request:
//
//	flock(fd, LOCK_SH); fstat(fd): write bit clear or nlink 0 (removed by
//	hand)? pread its last len(marker)+1 bytes: "\n" + marker (or exactly
//	the marker)? → sealed: unlock, reopen the highest segment (creating
//	highest+1 with O_EXCL if that one is sealed too) and retry; else
//	write(fd, line) — one write(2) on an O_APPEND descriptor — then
//	flock(fd, LOCK_UN).
//
// The kernel does not interleave single O_APPEND writes to a local file,
// so lines never mix; the shared lock only orders appends against sealing
// and repair, never against each other. A missing directory is created
// with mode 0775 less the umask, a missing segment with O_CREAT|O_EXCL
// and fchmod 0644 (0664 when the directory is group-writable, without the
// others' bit when others cannot enter it), then the directory is fsynced.
// Appends are not fsynced: a request survives the appender's crash, not
// the machine's. NFS and other file systems without atomic O_APPEND or
// flock are not supported.
//
// Rotation (by the consumer, when a completion finds the active segment at
// least SegmentSize bytes): create segment N+1 (durably), then seal N:
// flock(LOCK_EX) — which waits for appends in flight — append the marker
// (after a "\n" if a torn tail lacks one, which makes it a corrupt line
// that readers report), fsync, chmod a-w if the consumer owns the file,
// unlock. Every append to N has either finished before the seal or sees
// the seal and goes to N+1. Readers skip the marker, move past N only once
// it is sealed and read to its end; the consumer deletes segments below
// its cursor. A consumer's reader also seals an open segment that is not
// the highest (a rotation interrupted between its two steps).
//
// # Group-shared mode (trainer and daemon as different users)
//
// Sealing needs only write access, never ownership, so the trainer and the
// daemon may be different users of one group: make the state directory
// group-owned, group-writable and setgid (chmod 2770, so that everything
// created in it gets the group), and run both with umask 0007 (or 0002).
// Directories are then created 0770 (setgid inherited), segments 0660;
// either user creates segments, the daemon seals the trainer's segments
// by the marker and deletes them (write access to the directory).
// TestGroupSharedUsers runs this with two real users.
//
// # Reading, corruption and repair
//
// Reader is a scanner (Next/Record/Err) that tails the log. A complete
// line that does not parse (bad CRC, garbage) is reported through
// OnCorrupt as a *CorruptError (segment, offset, length, reason) and
// skipped, never fatal; if a valid record follows a torn fragment on the
// same line (a crash mid-write, then more appends) that record is
// recovered. A run of MaxLineSize bytes without a newline is skipped up to
// the next possible record start. An unterminated last line is either an
// append in progress or a torn write: in the active segment the reader
// waits (Pending); RepairSegment takes the segment's exclusive lock —
// appends hold it shared — and truncates the unterminated tail, which is
// then certainly torn. The consumer repairs every segment at open and its
// listener repairs a tail that stays pending across two polls. A torn
// tail in a sealed segment is reported and skipped.
//
// # Consumer: cursor and outcomes
//
// One Consumer per WAL directory (flock on consumer.lock, else ErrLocked).
// For each delivered record it runs the handler unless the generation is
// already done (or this same request already failed), appends an outcome
// line to outcomes.log and fsyncs it, then replaces the cursor file
// atomically (temp, fsync, rename, fsync dir). A crash at any point
// therefore re-delivers at most the records after the last persisted
// cursor, and those whose generation is done are skipped: delivery is at
// least once, handling idempotent by generation. A failed generation is
// retried when a newer request for it arrives.
//
//	outcome gen=<G> state=done|failed seg=<N> off=<O> ts=<unix ns> src=<S> msg=<M> crc=<C>\n
//	cursor seg=<N> off=<O> crc=<C>\n
//
// S and M are percent-encoded like src; C is the CRC-32C of the bytes
// before " crc=". At open a torn last outcome line is truncated and
// corrupt ones are skipped (reported by Repairs); a corrupt cursor file is
// an error (it is only ever replaced atomically).
//
// A cursor is sound when it is zero (none yet), or at most at its
// segment's end at offset 0 or just after a newline, or in a removed
// segment below a present one. Any other cursor — past its segment's end
// (a lost tail), inside a line, or above every segment (a state directory
// restored from mixed backups) — is a *CursorError (ErrCursorDamaged):
// OpenConsumer refuses it (every later request would be appended where
// the reader never looks) and CheckCursor reports it for `snapd wal list`
// and `snapd status`. RepairCursor (`snapd wal repair`), under the
// consumer lock, moves the cursor to the end of the longest run of
// already-handled records from the start of the cursor's segment (the
// lowest segment when it is gone) and writes it atomically: every record
// after it is delivered again, none is skipped.
//
// # Hostile files
//
// Every file of the WAL directory (segments, cursor, outcomes.log,
// consumer.lock) is opened through internal/safeopen: without blocking
// and without following a symlink, and refused unless the opened
// descriptor is a regular file. A segment that is a FIFO or a link (to
// /dev/zero, say) is an error naming it (safeopen.ErrNotRegular) for
// readers, writers, the consumer, `snapd wal list` and `snapd status`,
// never a hang; scripts/snapd_trainer.py opens segments the same way.
//
// # Listener
//
// Listener watches the WAL directory with fsnotify (falling back to
// polling if it cannot) and also polls every PollInterval; each wake-up
// drains everything appended so far (bursts coalesce into one read) and
// sends records in log order on the caller's channel. Start(ctx, out) /
// Close(ctx); no goroutine outlives Close.
package wal
