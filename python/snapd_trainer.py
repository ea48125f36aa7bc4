"""Trainer-side helper for snapd (stdlib only, one file, importable).

Two calls a training loop needs:

    publish_generation(gens_dir, gen, data)   # atomic, immutable checkpoint file
    publish_generation_dir(gens_dir, gen, fill)  # or a directory (HF shards)
    request_snapshot(gen, path, state_dir)    # append one WAL line, ~microseconds

A resumed run re-using numbers: publish_generation(..., replace=True) for
each number the abandoned run may have published, and
request_snapshot(..., resumed_from=R) on its first request only (the
callbacks declare it themselves after a framework resume).

With PyTorch the whole loop is three lines (snapd reads torch.save's files,
zip or legacy, without running their pickles: see formats/torch/doc.go):

    log = RequestLog(os.path.join(state_dir, "wal"))          # once
    ...
    path = publish_generation(gens_dir, step, lambda f: torch.save(model.state_dict(), f), suffix=".pt")
    request_snapshot(step, path, log=log)

(a training checkpoint works the same: torch.save({"model": ..., "optimizer":
opt.state_dict(), "step": step}, f); snapd names its tensors by key path,
e.g. optimizer.state.0.exp_avg, and keeps the rest so `snapd convert
gen.wtxt back.pt` restores it.)

request_snapshot writes the same line format as snapd's Go `wal` package
(see wal/doc.go):

    snapreq/1 gen=<dec> ts=<unix ns> by=<requester> [rank=<dec> world_size=<dec>] [resumed_from=<dec>] [meta=<percent-escaped canonical JSON>] src=<percent-escaped path> crc=<crc32c hex>\\n

with one os.write() on an O_APPEND file descriptor while holding a shared
flock on the segment, after checking (fstat + pread) that the segment is not
sealed (its last line is the seal marker "snapseal/1", or its write bit was
cleared by an older consumer). That is the whole
protocol; it lets any number of processes append at once without torn or
interleaved lines.

No fsync on the request path: a request survives the trainer crashing, not
the machine crashing (a torn line is detected by CRC and skipped by snapd).

request_snapshot(..., on_failure="warn"|"raise"|"ignore") also reports,
before appending, an earlier generation this process requested that the
daemon failed (SnapshotWarning, or SnapshotFailed without appending): it
reads the daemon's STATE_DIR/wal/outcomes.log itself (one os.stat per
call; new lines only when it grew), no subprocess.

Asking the daemon (one snapd process each, not for the hot path; the
binary is snapd=, else $SNAPD_BIN, else snapd on PATH):

    status(gen, state_dir)                  # Status(gen, state, message, source) now
    wait(gen, timeout=None, pushed=False, state_dir=...)  # or SnapshotFailed / TimeoutError
    generations(state_dir)                  # every requested generation, as dicts
    load(gen, repo=STATE_DIR/repo)          # snapd checkout + torch.load(weights_only=True)
    checkout(gen, dest, repo=...)           # the files themselves (a Trainer's checkpoint-N/)

Callbacks: SnapdTrainerCallback (Hugging Face Trainer, on_save) and
SnapdLightningCallback (PyTorch Lightning); neither library is imported
until a callback is constructed.
"""

import collections
import errno
import fcntl
import importlib
import json
import os
import pickle
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import warnings

__all__ = [
    "MAGIC",
    "MAX_GEN",
    "MAX_LINE_SIZE",
    "RequestLog",
    "crc32c",
    "encode_request",
    "encode_meta",
    "auto_meta",
    "publish_generation",
    "publish_generation_dir",
    "replace_published",
    "request_snapshot",
    "generation_name",
    "SnapshotFailed",
    "SnapshotWarning",
    "SnapdError",
    "SnapdNotFound",
    "Status",
    "status",
    "wait",
    "generations",
    "load",
    "checkout",
    "SnapdTrainerCallback",
    "SnapdLightningCallback",
]

MAGIC = "snapreq/1"
MAX_LINE_SIZE = 4096  # bytes, newline included (wal.MaxLineSize)
MAX_REQUESTER_LEN = 64
# Largest generation number (wal.MaxGen, snapshot.MaxGen): at most 18
# decimal digits, what snapd's WTXT writer and parser agree on. 0 and
# larger values (2^63-1 included) are refused with ValueError.
MAX_GEN = 999999999999999999
SEGMENT_SUFFIX = ".wal"
_REQUESTER_RE = re.compile(r"^[A-Za-z0-9._:@/+-]{1,64}\Z")
_SEGMENT_RE = re.compile(r"^([0-9]{8,20})\.wal\Z")
_MAX_OPEN_ATTEMPTS = 1000


def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_CRC_TABLE = _make_table()


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli) of bytes, as Go's crc32.Checksum(data, Castagnoli)."""
    t = _CRC_TABLE
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _escape(path):
    """Percent-encode bytes <= 0x20, >= 0x7f and '%' (uppercase hex)."""
    if isinstance(path, str):
        raw = os.fsencode(path)
    else:
        raw = bytes(path)
    out = []
    for b in raw:
        if b <= 0x20 or b >= 0x7F or b == 0x25:
            out.append("%%%02X" % b)
        else:
            out.append(chr(b))
    return "".join(out)


def _check_requester(requester):
    if not _REQUESTER_RE.match(requester):
        raise ValueError(
            "snapd: requester %r: want 1..%d of [A-Za-z0-9._:@/+-]" % (requester, MAX_REQUESTER_LEN)
        )


MAX_WORLD_SIZE = 1 << 16


def _rank_fields(rank, world_size):
    """The " rank=R world_size=W" fields of a rank request ("" for neither)."""
    if rank is None and world_size is None:
        return ""
    if rank is None or world_size is None:
        raise ValueError("snapd: rank and world_size go together")
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or world_size > MAX_WORLD_SIZE:
        raise ValueError("snapd: world_size %d out of range 1..%d" % (world_size, MAX_WORLD_SIZE))
    if rank < 0 or rank >= world_size:
        raise ValueError("snapd: rank %d out of range 0..%d for world_size %d" % (rank, world_size - 1, world_size))
    return " rank=%d world_size=%d" % (rank, world_size)


def _resume_field(gen, resumed_from, world_size=None):
    """The " resumed_from=R" field of a resumed run's request ("" for none)."""
    if resumed_from is None:
        return ""
    resumed_from = int(resumed_from)
    if resumed_from < 1 or resumed_from >= gen:
        raise ValueError("snapd: resumed_from %d must be in 1..%d (below gen %d)" % (resumed_from, gen - 1, gen))
    if world_size is not None:
        raise ValueError("snapd: resumed_from is declared on ordinary requests only, not on a rank's shard")
    return " resumed_from=%d" % resumed_from


# Generation metadata (request_snapshot(..., meta={...}); snapshot.UserMeta
# in Go, docs/FORMAT.md "Generation metadata"): at most MAX_META_KEYS
# JSON scalars under keys of [A-Za-z0-9_.-]{1,64}, strings of at most
# MAX_META_STRING bytes (UTF-8), canonical JSON of at most MAX_META_SIZE
# bytes.
MAX_META_KEYS = 64
MAX_META_STRING = 256
MAX_META_SIZE = 2048
_META_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")


def _meta_number(key, x):
    """A number as ECMAScript's Number.prototype.toString writes the double."""
    if isinstance(x, int):
        try:
            f = float(x)
        except OverflowError:
            f = None
        if f is None or f != x:
            raise ValueError("snapd: meta key %r: integer %d is not exactly a double (every integer up to 2**53 is)" % (key, x))
        x = f
    x = float(x)
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError("snapd: meta key %r: NaN and infinities are not JSON numbers" % key)
    if x == 0:
        return "0"
    r = repr(x)
    sign = "-" if r.startswith("-") else ""
    mant, _, exp = r.lstrip("-").partition("e")
    ip, _, fp = mant.partition(".")
    digits = ip + fp
    n = len(ip) + (int(exp) if exp else 0)  # value = 0.DIGITS x 10**n
    lead = len(digits) - len(digits.lstrip("0"))
    digits = digits[lead:].rstrip("0")
    n -= lead
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * -n + digits
    else:
        e = n - 1
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + out


def _meta_value(key, v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        try:
            n = len(v.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError("snapd: meta key %r: string is not valid Unicode (a lone surrogate)" % key)
        if n > MAX_META_STRING:
            raise ValueError("snapd: meta key %r: string of %d bytes exceeds %d" % (key, n, MAX_META_STRING))
        return json.dumps(v, ensure_ascii=True)
    if isinstance(v, (int, float)):
        return _meta_number(key, v)
    if callable(getattr(v, "item", None)) and getattr(v, "ndim", None) == 0:
        return _meta_value(key, v.item())  # a numpy or torch scalar
    raise ValueError("snapd: meta key %r: values are JSON scalars (str, int, float, bool, None), not %s" % (key, type(v).__name__))


def encode_meta(meta):
    """The canonical JSON text of a metadata dict ("" for None or {})."""
    if not meta:
        return ""
    if not isinstance(meta, dict):
        raise ValueError("snapd: meta must be a dict of JSON scalars")
    if len(meta) > MAX_META_KEYS:
        raise ValueError("snapd: meta has %d keys, at most %d" % (len(meta), MAX_META_KEYS))
    parts = []
    for k in sorted(meta):
        if not isinstance(k, str) or not _META_KEY_RE.match(k):
            raise ValueError("snapd: meta key %r: keys are 1..64 of [A-Za-z0-9_.-]" % (k,))
        parts.append('"%s":%s' % (k, _meta_value(k, meta[k])))
    text = "{" + ",".join(parts) + "}"
    if len(text) > MAX_META_SIZE:
        raise ValueError("snapd: meta: canonical JSON of %d bytes exceeds %d" % (len(text), MAX_META_SIZE))
    return text


def _meta_field(meta):
    """The " meta=..." field of a request ("" for no metadata); on a rank
    request the metadata of that rank's part (every rank of a generation
    must give the same)."""
    text = encode_meta(meta)
    if not text:
        return ""
    return " meta=" + _escape(text)


def _check_gen(gen):
    if gen < 1 or gen > MAX_GEN:
        raise ValueError("snapd: gen %d out of range 1..%d (at most 18 decimal digits)" % (gen, MAX_GEN))


def encode_request(gen, source, requester, ts_ns, rank=None, world_size=None, resumed_from=None, meta=None):
    """Return the request line (bytes, newline included).

    rank and world_size (both or neither) mark one rank's shard of a
    sharded generation. resumed_from=R declares that the run restarted
    from generation R's checkpoint (1 <= R < gen). meta is the
    generation's metadata (see request_snapshot).
    """
    gen = int(gen)
    ts_ns = int(ts_ns)
    _check_gen(gen)
    if ts_ns < 0 or ts_ns >= 1 << 63:
        raise ValueError("snapd: ts %d out of range" % ts_ns)
    _check_requester(requester)
    src = _escape(source)
    if not src:
        raise ValueError("snapd: empty source path")
    rk = _rank_fields(rank, world_size) + _resume_field(gen, resumed_from, world_size) + _meta_field(meta)
    body = ("%s gen=%d ts=%d by=%s%s src=%s" % (MAGIC, gen, ts_ns, requester, rk, src)).encode("ascii")
    line = b"%s crc=%08x\n" % (body, crc32c(body))
    if len(line) > MAX_LINE_SIZE:
        raise ValueError("snapd: request line of %d bytes exceeds %d" % (len(line), MAX_LINE_SIZE))
    return line


def _segments(wal_dir):
    segs = []
    try:
        names = os.listdir(wal_dir)
    except FileNotFoundError:
        return segs
    for name in names:
        m = _SEGMENT_RE.match(name)
        if m and "%08d.wal" % int(m.group(1)) == name and int(m.group(1)) > 0:
            segs.append(int(m.group(1)))
    segs.sort()
    return segs


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SEAL_MARKER = b"snapseal/1\n"


def _sealed(fd, st):
    """The segment is sealed: write bit clear, unlinked, or ends with the marker line."""
    if st.st_mode & 0o200 == 0 or st.st_nlink == 0:
        return True
    n = len(_SEAL_MARKER)
    if st.st_size < n:
        return False
    if st.st_size == n:
        return os.pread(fd, n, 0) == _SEAL_MARKER
    return os.pread(fd, n + 1, st.st_size - n - 1) == b"\n" + _SEAL_MARKER


def _segment_mode(wal_dir):
    """0644, or 0664 in a group-writable (group-shared) WAL directory (wal/segment.go)."""
    mode = 0o644
    dm = os.stat(wal_dir).st_mode
    if dm & 0o020:
        mode |= 0o020
    if dm & 0o001 == 0:
        mode &= ~0o004
    return mode


def _create_segment(wal_dir, n):
    """Create segment n exclusively; False if it already exists."""
    mode = _segment_mode(wal_dir)
    try:
        fd = os.open(os.path.join(wal_dir, "%08d.wal" % n), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, mode)  # the write bit means "open"; undo a strict umask
    finally:
        os.close(fd)
    _fsync_dir(wal_dir)
    return True


class RequestLog:
    """An open append handle on a snapd WAL directory (e.g. STATE_DIR/wal).

    Keep one per process and call append() from the training loop. Not
    thread-safe: use one per thread or a lock.
    """

    def __init__(self, wal_dir, requester=None):
        self.wal_dir = os.fspath(wal_dir)
        self.requester = requester or "py:%d" % os.getpid()
        _check_requester(self.requester)
        self._fd = -1
        self._seg = 0
        self._escaped = {}
        os.makedirs(self.wal_dir, mode=0o775, exist_ok=True)  # less the umask, as wal/writer.go
        self._watch = _watch_for(self.wal_dir)
        self._open()

    def _open(self):
        for _ in range(_MAX_OPEN_ATTEMPTS):
            segs = _segments(self.wal_dir)
            if not segs:
                _create_segment(self.wal_dir, 1)
                continue
            last = segs[-1]
            path = os.path.join(self.wal_dir, "%08d.wal" % last)
            try:
                # Never block (a FIFO) nor follow a link (e.g. to /dev/zero):
                # a segment is always a regular file snapd created.
                # Read access too: the seal check reads the last line.
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NONBLOCK | os.O_NOFOLLOW)
            except FileNotFoundError:
                continue
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENXIO):
                    raise OSError(e.errno, "snapd: WAL segment is not a regular file (a symlink or FIFO)", path) from None
                raise
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                raise OSError(errno.EINVAL, "snapd: WAL segment is not a regular file", path)
            os.set_blocking(fd, True)
            if _sealed(fd, st):  # sealed: start the next one
                os.close(fd)
                _create_segment(self.wal_dir, last + 1)
                continue
            self._fd = fd
            self._seg = last
            return
        raise OSError(errno.EAGAIN, "snapd: no open WAL segment in %s" % self.wal_dir)

    def append(self, gen, source, ts_ns=None, rank=None, world_size=None, resumed_from=None, meta=None):
        """Append one request. Raises ValueError for bad input, OSError on I/O.

        rank and world_size (both or neither) mark one rank's shard of a
        sharded generation (the daemon must be configured with ranks:).
        resumed_from=R declares that the run restarted from generation R's
        checkpoint, meta is the generation's metadata (see
        request_snapshot).
        """
        if self._fd < 0:
            raise ValueError("snapd: RequestLog is closed")
        src = self._escaped.get(source)
        if src is None:
            src = _escape(source)
            if not src:
                raise ValueError("snapd: empty source path")
            if len(self._escaped) > 1024:
                self._escaped.clear()
            self._escaped[source] = src
        if ts_ns is None:
            ts_ns = time.time_ns()
        gen = int(gen)
        _check_gen(gen)
        if ts_ns < 0 or ts_ns >= 1 << 63:
            raise ValueError("snapd: ts %d out of range" % ts_ns)
        rk = _rank_fields(rank, world_size) + _resume_field(gen, resumed_from, world_size) + _meta_field(meta)
        body = ("%s gen=%d ts=%d by=%s%s src=%s" % (MAGIC, gen, ts_ns, self.requester, rk, src)).encode("ascii")
        line = b"%s crc=%08x\n" % (body, crc32c(body))
        if len(line) > MAX_LINE_SIZE:
            raise ValueError("snapd: request line of %d bytes exceeds %d" % (len(line), MAX_LINE_SIZE))
        for _ in range(_MAX_OPEN_ATTEMPTS):
            fd = self._fd
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                if not _sealed(fd, os.fstat(fd)):
                    n = os.write(fd, line)
                    if n != len(line):
                        raise OSError(errno.EIO, "snapd: short write %d of %d bytes" % (n, len(line)))
                    # O_APPEND left the offset just after our line: where
                    # it starts is the position outcomes.log names.
                    self._watch.record(gen, self._seg, os.lseek(fd, 0, os.SEEK_CUR) - n)
                    return
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)  # sealed by the consumer: move to the newest segment
            self._fd = -1
            self._open()
        raise OSError(errno.EAGAIN, "snapd: no open WAL segment in %s" % self.wal_dir)

    def close(self):
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def request_snapshot(gen, path, state_dir=".snapd", requester=None, ts_ns=None, log=None, rank=None, world_size=None,
                     resumed_from=None, on_failure="warn", meta=None):
    """Ask snapd to snapshot generation gen published at path.

    Appends one line to STATE_DIR/wal. Pass log (a RequestLog) from the hot
    loop to reuse the open segment; without it a RequestLog is opened and
    closed for this one call. rank and world_size (both or neither) mark
    path as rank's shard of a generation written by world_size ranks.

    After a crash, a run that restarts from generation R's checkpoint
    declares it on its first request: request_snapshot(R + 1, path,
    resumed_from=R). snapd then chains gen to R and records the
    generations it had above R as abandoned (a signed ledger record).
    Without the declaration a generation number that snapd already
    snapshotted from other content fails (it is never silently re-used).

    meta={"step": 1200, "epoch": 3, "loss": 0.41, "lr": 3e-4} attaches
    metadata to the generation: JSON scalars (str, int, float, bool,
    None; a numpy or torch scalar is read with .item()), at most 64 keys
    of [A-Za-z0-9_.-]{1,64}, strings of at most 256 bytes, 2048 bytes of
    canonical JSON (ValueError otherwise). snapd stores it inside the
    generation (signed with it) and shows it in wal list, status, the
    commit's Snapd-Meta trailer, diff, the review and snapd log. With
    rank=R it is stored in rank R's part; every rank of the generation
    must give the same metadata (the committer refuses the generation
    otherwise, naming the ranks that differ).

    on_failure ("warn", "raise" or "ignore") says what to do, before
    appending, when an earlier generation (a lower number) that this
    process requested from this WAL has failed in the daemon: "warn"
    issues a SnapshotWarning (warnings.warn), "raise" raises
    SnapshotFailed(gen, reason) WITHOUT appending this request (call again
    to request it: each failed generation is reported once), "ignore"
    skips the check. The check needs no subprocess: one os.stat of
    STATE_DIR/wal/outcomes.log per call, and only when it grew, reading
    the new outcome lines (see _FailureWatch).
    """
    if on_failure not in _ON_FAILURE:
        raise ValueError("snapd: on_failure %r: want one of %s" % (on_failure, ", ".join(_ON_FAILURE)))
    if log is not None:
        if on_failure != "ignore":
            log._watch.check(int(gen), on_failure)
        log.append(gen, path, ts_ns, rank=rank, world_size=world_size, resumed_from=resumed_from, meta=meta)
        return
    with RequestLog(os.path.join(os.fspath(state_dir), "wal"), requester) as lg:
        if on_failure != "ignore":
            lg._watch.check(int(gen), on_failure)
        lg.append(gen, path, ts_ns, rank=rank, world_size=world_size, resumed_from=resumed_from, meta=meta)


def generation_name(gen, suffix=""):
    """The entry name of generation gen in the generations directory."""
    if suffix and (not suffix.startswith(".") or "/" in suffix):
        raise ValueError("snapd: suffix %r must start with '.' and contain no '/'" % suffix)
    return "gen-%06d%s" % (int(gen), suffix)


def publish_generation(gens_dir, gen, data, suffix=".safetensors", replace=False, state_dir=None, replace_wait=60.0):
    """Atomically publish checkpoint bytes as generation gen; return its path.

    data is bytes-like, or a callable that receives the open binary file and
    writes the checkpoint into it. The file is written under a temporary
    dot-name in gens_dir, fsynced, hard-linked to gen-NNNNNN<suffix> (which
    fails if it exists: generations are immutable) and the directory is
    fsynced. Raises FileExistsError if generation gen is already published.

    replace=True is for a resumed run re-using generation numbers: a
    published gen is first moved aside, but only when snapd is done with
    it (replace_published, waiting up to replace_wait seconds); otherwise
    FileExistsError says why.
    """
    gens_dir = os.fspath(gens_dir)
    os.makedirs(gens_dir, exist_ok=True)
    name = generation_name(gen, suffix)
    prefix = generation_name(gen)
    for existing in os.listdir(gens_dir):
        if existing == prefix or existing.startswith(prefix + "."):
            if not replace:
                raise _published_error(gen, os.path.join(gens_dir, existing))
            replace_published(gens_dir, gen, state_dir, replace_wait)
            break
    final = os.path.join(gens_dir, name)
    tmp = os.path.join(gens_dir, ".tmp-%s-%d-%s" % (name, os.getpid(), os.urandom(4).hex()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb", closefd=True) as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, final)
        except OSError as e:
            if e.errno in (errno.EEXIST,):
                raise
            # No hard links on this file system: rename (clobber check above).
            os.rename(tmp, final)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    _fsync_dir(gens_dir)
    return final


def publish_generation_dir(gens_dir, gen, fill, suffix="", replace=False, state_dir=None, replace_wait=60.0):
    """Atomically publish a checkpoint directory as generation gen.

    For sharded checkpoints (model.safetensors.index.json plus shards, e.g.
    model.save_pretrained(d, max_shard_size="2GB")) or several files: snapd
    reads the directory as one snapshot. fill(d) writes the files into the
    temporary directory d (a dot-name in gens_dir); every file and
    directory in it is then fsynced, d is renamed to gen-NNNNNN<suffix>
    and gens_dir is fsynced. Raises FileExistsError if generation gen is
    already published (replace=True: as publish_generation). Returns the
    final path.
    """
    gens_dir = os.fspath(gens_dir)
    os.makedirs(gens_dir, exist_ok=True)
    name = generation_name(gen, suffix)
    prefix = generation_name(gen)

    def published():
        for existing in os.listdir(gens_dir):
            if existing == prefix or existing.startswith(prefix + "."):
                return os.path.join(gens_dir, existing)
        return None

    if published():
        if not replace:
            raise _published_error(gen, published())
        replace_published(gens_dir, gen, state_dir, replace_wait)
    final = os.path.join(gens_dir, name)
    tmp = os.path.join(gens_dir, ".tmp-%s-%d-%s" % (name, os.getpid(), os.urandom(4).hex()))
    os.mkdir(tmp, 0o775)  # less the umask: group-writable in the group-shared mode
    try:
        fill(tmp)
        for root, dirs, files in os.walk(tmp):
            for f in files:
                p = os.path.join(root, f)
                if os.path.islink(p) or not os.path.isfile(p):
                    continue
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            _fsync_dir(root)
        # os.rename would replace an empty directory: check again right
        # before (generations are immutable; the Go side uses
        # RENAME_NOREPLACE).
        if published():
            raise _published_error(gen, published())
        os.rename(tmp, final)
    except BaseException:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(gens_dir)
    return final


def _published_error(gen, path):
    return FileExistsError(errno.EEXIST, "snapd: generation %d already published (a resumed run re-using the number: "
                           "replace=True, with resumed_from= on its first request)" % int(gen), path)


_STORE_LOCK_WAIT = 30.0  # seconds; snapd holds the store lock for a scan of the pins or a few renames


class _NotYet(FileExistsError):
    """snapd is still at the entry (pinned, or its request not handled)."""


def replace_published(gens_dir, gen, state_dir=None, wait=60.0):
    """Move generation gen's published entry out of gens_dir, so that a
    resumed run can publish the number again; a no-op when none is there.

    It follows the generation store's protocol (snapshot/genstore.go): with
    the store's exclusive lock (gens_dir/.lock) held, the entry is renamed
    to a .trash- name, the directory fsynced, and then deleted. It refuses
    (FileExistsError, saying why) unless snapd is done with the entry: no
    pin file for gen in gens_dir/.pins (a pin of a process that is gone
    counts too, until snapd clears it), and the newest request for gen in
    the WAL (STATE_DIR/wal; state_dir defaults to gens_dir's parent) has
    an outcome: done (the abandoned generation's snapshot stays in snapd's
    history; only the trainer's copy goes) or failed (snapd never
    recorded it). While snapd is still at it (a run restarted at once,
    before the daemon reached the crashed run's request), it waits up to
    wait seconds, checking every 0.2 s, then refuses.
    """
    gens_dir = os.fspath(gens_dir)
    gen = int(gen)
    _check_gen(gen)
    if state_dir is None:
        state_dir = os.path.dirname(os.path.abspath(gens_dir))
    deadline = time.monotonic() + max(0.0, float(wait))
    while True:
        try:
            return _replace_once(gens_dir, gen, state_dir)
        except _NotYet:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _replace_once(gens_dir, gen, state_dir):
    prefix = generation_name(gen)
    fd = os.open(os.path.join(gens_dir, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    trash = None
    try:
        deadline = time.monotonic() + _STORE_LOCK_WAIT
        wait = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError("snapd: replace generation %d: the store lock %s is held by another process"
                                       % (gen, os.path.join(gens_dir, ".lock")))
                time.sleep(wait)
                wait = min(2 * wait, 0.05)
        entry = None
        for name in os.listdir(gens_dir):
            if name == prefix or name.startswith(prefix + "."):
                entry = name
        if entry is None:
            return
        path = os.path.join(gens_dir, entry)
        try:
            pins = os.listdir(os.path.join(gens_dir, ".pins"))
        except FileNotFoundError:
            pins = []
        for name in pins:
            head = name.split(".", 1)[0]
            if name.endswith(".pin") and head.isdigit() and int(head) == gen:
                raise _NotYet(errno.EEXIST, "snapd: generation %d is pinned (snapd is reading it, or a pin of a "
                              "process that is gone: snapd gc clears it); not replaced" % gen, path)
        state = _newest_outcome(os.path.join(os.fspath(state_dir), "wal"), gen)
        if state is None:
            raise FileExistsError(errno.EEXIST, "snapd: generation %d is published and was never requested; not replaced" % gen, path)
        if state not in ("done", "failed"):
            raise _NotYet(errno.EEXIST, "snapd: generation %d is published and its newest request is not handled yet; not replaced" % gen, path)
        trash = os.path.join(gens_dir, ".trash-%s-%s" % (entry, os.urandom(8).hex()))
        os.rename(path, trash)
        _fsync_dir(gens_dir)
    finally:
        os.close(fd)  # releases the lock
    if os.path.isdir(trash) and not os.path.islink(trash):
        shutil.rmtree(trash, ignore_errors=True)
    else:
        try:
            os.unlink(trash)
        except FileNotFoundError:
            pass


def _open_regular(path):
    """path opened for reading when it is a regular file (never blocking on
    a FIFO, never following a symlink); None when it is missing or not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def _wal_requests(wal_dir, gen):
    """(seg, off) of every request line for gen in the WAL's segments."""
    want = b"%s gen=%d " % (MAGIC.encode(), gen)
    out = []
    for seg in _segments(wal_dir):
        name = "%08d.wal" % seg
        off = 0
        f = _open_regular(os.path.join(wal_dir, name))
        if f is None:
            continue  # reclaimed meanwhile, or not a regular file
        with f:
            for line in f:
                if line.startswith(want):
                    out.append((seg, off))
                off += len(line)
    return out


def _outcomes_for(wal_dir, gen):
    """[(state, (seg, off))] of gen's outcome lines, in log order (CRC-checked)."""
    out = []
    f = _open_regular(os.path.join(wal_dir, "outcomes.log"))
    if f is None:
        return out
    with f:
        for line in f:
            o = _parse_outcome(line.rstrip(b"\n")) if line.endswith(b"\n") else None
            if o is not None and o[0] == gen:
                out.append((o[1], o[2]))
    return out


def _newest_outcome(wal_dir, gen):
    """The outcome of generation gen's newest request: "done", "failed",
    "pending" (not handled yet) or None (never requested). Without its
    request line (a reclaimed WAL segment), the newest outcome line."""
    outs = _outcomes_for(wal_dir, gen)
    reqs = _wal_requests(wal_dir, gen)
    if reqs:
        newest = max(reqs)
        states = [state for state, pos in outs if pos == newest]
        return states[-1] if states else "pending"
    return outs[-1][0] if outs else None


# ---------------------------------------------------------------------------
# Outcomes: did an earlier request of this process fail? (request_snapshot's
# on_failure check, no subprocess)

class SnapshotFailed(Exception):
    """snapd could not snapshot generation gen; reason is the daemon's message."""

    def __init__(self, gen, reason):
        super().__init__("snapd: generation %d failed: %s" % (gen, reason))
        self.gen = gen
        self.reason = reason


class SnapshotWarning(UserWarning):
    """An earlier generation failed (request_snapshot(on_failure="warn"))."""


_ON_FAILURE = ("warn", "raise", "ignore")
_PCT_RE = re.compile(rb"%([0-9A-F]{2})")


def _unescape(v):
    return _PCT_RE.sub(lambda m: bytes((int(m.group(1), 16),)), v).decode("utf-8", "replace")


class _FailureWatch:
    """This process's requests to one WAL and their outcomes.

    outcomes.log (wal/doc.go) is append-only, one line per handled request:

        outcome gen=<G> state=done|failed seg=<N> off=<O> ts=<T> src=<S> msg=<M> crc=<C>

    where seg/off is where the request line starts. RequestLog.append
    records (seg, off) of each line it writes (lseek after the O_APPEND
    write); check() stats the file and, when it grew, reads only the new
    complete lines, parsing (and CRC-checking) those of generations this
    process requested. The verdict of our request for gen is the last
    outcome at or after its position: failed, or done (e.g. a retry).
    Cost per request_snapshot: one os.stat when nothing changed.
    """

    def __init__(self, wal_dir):
        self.path = os.path.join(wal_dir, "outcomes.log")
        self.lock = threading.Lock()
        self.mine = {}      # gen -> (seg, off) of our latest request for it
        self.failed = {}    # gen -> message, our request's latest verdict is failed
        self.reported = set()
        self.ident = None   # (st_dev, st_ino) of the file read so far
        self.off = 0        # bytes read: always just after a newline

    def record(self, gen, seg, off):
        with self.lock:
            self.mine[gen] = (seg, off)
            self.failed.pop(gen, None)
            self.reported.discard(gen)

    def _refresh(self):
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        ident = (st.st_dev, st.st_ino)
        if ident != self.ident or st.st_size < self.off:
            self.ident, self.off = ident, 0  # replaced (a restored state dir): read it all again
            self.failed.clear()
        if st.st_size == self.off:
            return
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            data = os.pread(fd, st.st_size - self.off, self.off)
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1  # an unterminated tail is read next time
        for line in data[:end].splitlines():
            o = _parse_outcome(line)
            if o is None:
                continue
            gen, state, pos, msg = o
            mine = self.mine.get(gen)
            if mine is None or pos < mine:
                continue  # not ours, or an outcome of an older request for the same gen
            if state == "failed":
                self.failed[gen] = msg
            elif state == "done":
                self.failed.pop(gen, None)
        self.off += end

    def check(self, gen, on_failure):
        with self.lock:
            self._refresh()
            if not self.failed:
                return
            news = [(g, self.failed[g]) for g in sorted(self.failed) if g < gen and g not in self.reported]
            if on_failure == "raise":
                news = news[:1]  # one at a time: the next call reports the next
            self.reported.update(g for g, _ in news)
        for g, msg in news:
            if on_failure == "raise":
                raise SnapshotFailed(g, msg)
            warnings.warn(SnapshotWarning("snapd: generation %d failed: %s" % (g, msg)), stacklevel=3)


def _parse_outcome(line):
    """(gen, state, (seg, off), msg) of one outcomes.log line without its
    newline, or None when it is not a well-formed outcome with a good CRC."""
    f = line.split(b" ")
    if len(f) != 9 or f[0] != b"outcome" or not f[1].startswith(b"gen=") or not f[2].startswith(b"state="):
        return None
    body, _, crc = line.rpartition(b" crc=")
    try:
        if int(crc, 16) != crc32c(body):
            return None
        gen = int(f[1][4:])
        pos = (int(f[3][4:]), int(f[4][4:]))
    except ValueError:
        return None
    return gen, f[2][6:].decode("ascii", "replace"), pos, _unescape(f[7][4:])


_watches = {}
_watches_lock = threading.Lock()


def _watch_for(wal_dir):
    key = os.path.realpath(wal_dir)
    with _watches_lock:
        w = _watches.get(key)
        if w is None:
            w = _watches[key] = _FailureWatch(key)
        return w


# ---------------------------------------------------------------------------
# Asking the daemon's state through the snapd binary (status, wait,
# generations, load). None of these is for the hot path: each runs one
# snapd process.

class SnapdError(RuntimeError):
    """The snapd binary failed (exit_code, its message and hint)."""

    def __init__(self, message, exit_code=None, hint=""):
        super().__init__(message + ("\nhint: " + hint if hint else ""))
        self.exit_code = exit_code
        self.hint = hint


class SnapdNotFound(SnapdError, FileNotFoundError):
    """No snapd binary: pass snapd=PATH, set $SNAPD_BIN or put snapd on PATH."""


Status = collections.namedtuple("Status", "gen state message source")
Status.__doc__ = """A generation's state: pending, done, pushed or failed (message: why)."""


def _snapd_bin(snapd=None):
    """The snapd binary: snapd, else $SNAPD_BIN, else "snapd" on PATH."""
    name = snapd or os.environ.get("SNAPD_BIN") or "snapd"
    name = os.fspath(name)
    found = shutil.which(name) if os.sep not in name else (name if os.access(name, os.X_OK) and os.path.isfile(name) else None)
    if not found:
        src = "snapd=" if snapd else ("$SNAPD_BIN" if os.environ.get("SNAPD_BIN") else "PATH")
        raise SnapdNotFound("snapd: no snapd binary %r (from %s): pass snapd=PATH, set $SNAPD_BIN or put snapd on PATH" % (name, src))
    return found


def _run_snapd(snapd, args):
    """Run snapd ARGS; return (exit code, parsed JSON stdout or None, stderr)."""
    p = subprocess.run([_snapd_bin(snapd)] + args, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    doc = None
    try:
        doc = json.loads(p.stdout.decode("utf-8"))
    except ValueError:
        pass
    return p.returncode, doc, p.stderr.decode("utf-8", "replace").strip()


def _snapd_error(args, code, doc, errs):
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        e = doc["error"]
        return SnapdError("snapd %s: %s" % (args[0], e.get("message", "")), code, e.get("hint", ""))
    return SnapdError("snapd %s: exit %d: %s" % (args[0], code, errs), code)


def _wait_args(gen, state_dir, pushed, config):
    gen = int(gen)
    _check_gen(gen)
    args = ["wait", str(gen), "--json", "--state-dir", os.fspath(state_dir)]
    if pushed:
        args.append("--pushed")
    if config is not None:
        args += ["--config", os.fspath(config)]
    return gen, args


def _status_of(gen, doc):
    return Status(int(doc.get("gen", gen)), doc.get("state", ""), doc.get("message", ""), doc.get("source", ""))


def status(gen, state_dir=".snapd", pushed=False, snapd=None, config=None):
    """The state of generation gen now, as a Status(gen, state, message, source).

    state is "pending" (not requested or not handled yet), "done",
    "failed" (message: the daemon's reason) or, with pushed=True (a daemon
    with a Git remote), "pushed" once its commit reached the remote.
    Runs `snapd wait GEN --once --json`; raises SnapdError if snapd
    cannot read the state directory, SnapdNotFound without a binary.
    """
    gen, args = _wait_args(gen, state_dir, pushed, config)
    args.append("--once")
    code, doc, errs = _run_snapd(snapd, args)
    if code != 0 or not isinstance(doc, dict) or "state" not in doc:
        raise _snapd_error(args, code, doc, errs)
    return _status_of(gen, doc)


def wait(gen, timeout=None, pushed=False, state_dir=".snapd", snapd=None, config=None):
    """Block until generation gen is done (pushed=True: pushed); return its Status.

    Raises SnapshotFailed(gen, reason) if the daemon failed it (or, with
    pushed, the push queue needs attention), TimeoutError after timeout
    seconds (None: wait for ever; the generation may still land later),
    SnapdError for any other snapd failure. Runs `snapd wait GEN --json
    [--pushed] [--timeout D]`.
    """
    gen, args = _wait_args(gen, state_dir, pushed, config)
    if timeout is not None:
        args += ["--timeout", "%dms" % max(1, int(float(timeout) * 1000 + 0.999))]
    code, doc, errs = _run_snapd(snapd, args)
    if code == 0 and isinstance(doc, dict) and "state" in doc:
        return _status_of(gen, doc)
    if code == 1 and isinstance(doc, dict) and doc.get("state") == "failed":
        raise SnapshotFailed(gen, doc.get("message", ""))
    if code == 2 and timeout is not None and isinstance(doc, dict) and "timed out" in doc.get("error", {}).get("message", ""):
        raise TimeoutError("snapd: generation %d: %s" % (gen, doc["error"]["message"]))
    raise _snapd_error(args, code, doc, errs)


def generations(state_dir=".snapd", snapd=None):
    """Every requested generation, ascending: a list of dicts.

    Each has gen, state (pending, done, failed), message (why it failed),
    source, requester, ts (RFC 3339), requests (how many requests name the
    generation), resumed_from when the request declared a resume and
    meta (a dict; {} without metadata) as the request attached it. The
    newest request of a generation decides, as for wait() and status().
    Runs `snapd wal list --json`; a damaged WAL cursor (which `snapd wal
    repair` fixes) is reported as a SnapshotWarning, the list still
    returned.
    """
    args = ["wal", "list", "--json", "--state-dir", os.fspath(state_dir)]
    code, doc, errs = _run_snapd(snapd, args)
    if not isinstance(doc, dict) or "requests" not in doc:
        raise _snapd_error(args, code, doc, errs)
    if doc.get("cursor_error"):
        warnings.warn(SnapshotWarning("snapd: %s (run snapd wal repair with the daemon stopped)" % doc["cursor_error"]), stacklevel=2)
    out = {}
    for r in doc["requests"]:
        g = int(r["gen"])
        e = {"gen": g, "state": r.get("state", ""), "message": r.get("message", ""), "source": r.get("source", ""),
             "requester": r.get("requester", ""), "ts": r.get("ts", ""),
             "requests": out[g]["requests"] + 1 if g in out else 1}
        if r.get("resumed_from"):
            e["resumed_from"] = int(r["resumed_from"])
        e["meta"] = dict(r.get("meta") or {})
        out[g] = e
    return [out[g] for g in sorted(out)]


def load(gen, repo=None, state_dir=".snapd", map_location="cpu", trusted=False, snapd=None):
    """Generation gen restored from the snapshot repository, via torch.load.

    Runs `snapd checkout GEN TMP.pt --repo REPO` (REPO: default
    STATE_DIR/repo, the daemon's repository, which with a remote keeps
    only the newest retention.repo pushed generations; or any clone of the
    remote, for older ones) into a
    temporary directory, then torch.load(TMP.pt, map_location,
    weights_only=True): what snapd writes holds only tensors and plain
    containers. When torch's weights_only unpickler refuses the file (torch
    1.13's has no opcode for a Python float, so it refuses every optimizer
    state_dict), it is loaded again through an unpickler that resolves only
    the globals snapd's .pt writer emits (tensor and parameter rebuilds,
    storages, dtypes, OrderedDict, bytes); anything else, such as a
    pickle snapd carried verbatim because it holds a class of the training
    code, is refused with SnapdError naming the global. trusted=True loads
    with weights_only=False (needed only for such a file, or by a torch
    without weights_only, before 1.13): that unpickles arbitrary objects,
    so pass it only for a repository you trust. gen is a number or
    "latest". Needs torch (imported here, not at import).
    """
    if repo is None:
        repo = os.path.join(os.fspath(state_dir), "repo")
    if str(gen) != "latest":
        _check_gen(int(gen))
    import torch  # lazily: the module itself needs only the standard library
    with tempfile.TemporaryDirectory(prefix="snapd-load-") as tmp:
        out = os.path.join(tmp, "gen.pt")
        args = ["checkout", str(gen), out, "--repo", os.fspath(repo)]
        code, doc, errs = _run_snapd(snapd, args)
        if code != 0:
            err = _snapd_error(args, code, doc, errs)
            # A checkpoint directory (a Trainer's checkpoint-N) may not
            # fit one .pt: say so when it restores as a directory.
            probe = os.path.join(tmp, "dir") + os.sep
            if _run_snapd(snapd, ["checkout", str(gen), probe, "--repo", os.fspath(repo)])[0] == 0:
                files = sorted(os.listdir(probe))
                raise SnapdError("snapd load: generation %s is a checkpoint directory (%s), not one state dict: %s"
                                 % (gen, ", ".join(files[:8]) + (", ..." if len(files) > 8 else ""), err), code,
                                 "checkout(%s, DIR + \"/\") restores it, e.g. for Trainer.train(resume_from_checkpoint=DIR)" % gen) from None
            raise err
        if trusted:
            return torch.load(out, map_location=map_location)
        try:
            return torch.load(out, map_location=map_location, weights_only=True)
        except TypeError as e:
            if "weights_only" in str(e):
                raise RuntimeError("snapd: this torch %s has no weights_only; load(..., trusted=True) unpickles without it"
                                   % getattr(torch, "__version__", "?")) from e
            raise
        except pickle.UnpicklingError as e:
            refused = e  # e.g. torch 1.13's "Unsupported operand 71" (BINFLOAT)
        hint = "load(..., trusted=True) unpickles it, for a repository you trust"
        if not _weights_only_predates_floats(torch):
            raise SnapdError("snapd load: generation %s: torch's weights_only unpickler refused it: %s"
                             % (gen, str(refused).rsplit("WeightsUnpickler error:", 1)[-1].strip()), None, hint)
        try:
            return _load_restricted(torch, out, map_location)
        except _RefusedGlobal as e:
            raise SnapdError("snapd load: generation %s: %s" % (gen, e), None, hint) from None


def checkout(gen, dest, repo=None, state_dir=".snapd", snapd=None):
    """Restore generation gen to dest and return dest's path.

    Runs `snapd checkout GEN DEST --repo REPO` (REPO as for load). dest
    ending in os.sep, or an existing directory, is restored as a
    checkpoint directory (a Trainer's checkpoint-N, a sharded save, a DCP
    directory: the files as they were published); otherwise the format
    is dest's extension (.pt, .safetensors, .npz, .wtxt, ...). Nothing is
    unpickled here. gen is a number or "latest".

        ck = snapd_trainer.checkout(20, "/tmp/ck-20/", repo="/data/models.git")
        trainer.train(resume_from_checkpoint=ck)
    """
    if repo is None:
        repo = os.path.join(os.fspath(state_dir), "repo")
    if str(gen) != "latest":
        _check_gen(int(gen))
    dest = os.fspath(dest)
    args = ["checkout", str(gen), dest, "--repo", os.fspath(repo)]
    code, doc, errs = _run_snapd(snapd, args)
    if code != 0:
        raise _snapd_error(args, code, doc, errs)
    return os.path.abspath(dest)


def _weights_only_predates_floats(torch):
    """Whether this torch's weights_only unpickler lacks the opcodes every
    optimizer state_dict needs (torch 1.x: no BINFLOAT)."""
    m = re.match(r"([0-9]+)\.", getattr(torch, "__version__", ""))
    return m is not None and int(m.group(1)) < 2


def _load_restricted(torch, path, map_location):
    """torch.load of path through _restricted_pickle. torch 1.13's
    torch.load drops a pickle_module when weights_only is off (it always
    unpickles with the pickle module), so this calls the loaders torch.load
    dispatches to (zip or legacy) with the restricted module itself."""
    ser = torch.serialization
    m = _restricted_pickle(torch)
    with open(path, "rb") as f:
        if ser._is_zipfile(f):
            with ser._open_zipfile_reader(f) as z:
                return ser._load(z, map_location, m, encoding="utf-8")
        return ser._legacy_load(f, map_location, m, encoding="utf-8")


_GLOBAL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,199}\Z")


class _RefusedGlobal(pickle.UnpicklingError):
    """A global outside what snapd's .pt writer emits."""


def _writer_globals(torch):
    """The globals snapd's .pt writer emits (formats/torch/encode.go),
    resolved in this torch: module.name -> object. Nothing here runs code
    beyond building tensors, storages and plain containers."""
    import codecs
    g = {"collections.OrderedDict": collections.OrderedDict, "_codecs.encode": codecs.encode}
    u = torch._utils
    for f in ("_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter"):
        if hasattr(u, f):
            g["torch._utils." + f] = getattr(u, f)
    if hasattr(torch, "storage") and hasattr(torch.storage, "UntypedStorage"):
        g["torch.storage.UntypedStorage"] = torch.storage.UntypedStorage
    for name in dir(torch):
        v = getattr(torch, name, None)
        if isinstance(v, torch.dtype) or (name.endswith("Storage") and isinstance(v, type)):
            g["torch." + name] = v
    return g


def _restricted_pickle(torch):
    """A pickle module (torch.serialization's pickle_module) whose
    Unpickler resolves only _writer_globals: the documented way to restrict
    what a pickle may call, since find_class is its only road to a callable
    (torch's own wrapper resolves storage type names before it)."""
    import types
    allowed = _writer_globals(torch)

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            key = "%s.%s" % (module, name)
            v = allowed.get(key)
            if v is None:
                shown = key if _GLOBAL_RE.match(key) else "a global with an unprintable name"
                raise _RefusedGlobal("the checkpoint names %s, which snapd's .pt writer never emits: it is not loaded without trusted=True"
                                     % shown)
            return v

    m = types.ModuleType("snapd_trainer_restricted_pickle")
    m.Unpickler = Unpickler
    m.load = lambda f, **kw: Unpickler(f, **kw).load()
    m.UnpicklingError = pickle.UnpicklingError
    return m


# ---------------------------------------------------------------------------
# Training-framework callbacks. Neither library is imported at module
# import: constructing a callback subclasses the library's base class
# (transformers.TrainerCallback, lightning's Callback) when it is
# importable, else object (the frameworks call hooks by name).

_bases = {}


def _optional_base(key, candidates):
    if key not in _bases:
        base = None
        for mod, attr in candidates:
            try:
                base = getattr(importlib.import_module(mod), attr)
                break
            except Exception:  # not installed, or broken: fall back to a plain class
                continue
        _bases[key] = (base, {})
    return _bases[key]


def _with_base(cls, key, candidates):
    base, subclasses = _optional_base(key, candidates)
    if base is None or issubclass(cls, base):
        return cls
    sub = subclasses.get(cls)
    if sub is None:
        sub = subclasses[cls] = type(cls.__name__, (cls, base), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
    return sub


def _meta_key(k):
    """A metric name as a metadata key: "/" (Lightning's "val/loss") becomes
    "."; None when the name cannot be one."""
    k = str(k).replace("/", ".")
    return k if _META_KEY_RE.match(k) else None


def auto_meta(fields, extra=None):
    """Metadata for a generation from what a framework knows at a save:
    fields (step, epoch, logged metrics; names made keys by _meta_key),
    then extra (the user's dict, which wins). Values that are not JSON
    scalars (tensors of more than one element, NaN, lists) are left out, as
    are keys beyond the limits: a checkpoint is never refused for its
    metrics. Returns a dict encode_meta accepts."""
    out = {}
    for src in (fields or {}), (extra or {}):
        for k, v in src.items():
            key = _meta_key(k)
            if key is None:
                continue
            try:
                _meta_value(key, v)
            except (ValueError, TypeError, RuntimeError):
                continue
            if hasattr(v, "item") and not isinstance(v, (bool, int, float, str)):
                v = v.item()
            if key not in out and len(out) >= MAX_META_KEYS:
                continue
            out[key] = v
    while out:
        try:
            encode_meta(out)
            break
        except ValueError:
            out.pop(sorted(out)[-1])  # over 2048 bytes: drop keys from the end
    return out


class _CallbackBase:
    def __init__(self, state_dir=".snapd", requester=None, on_failure="warn", meta=True):
        if on_failure not in _ON_FAILURE:
            raise ValueError("snapd: on_failure %r: want one of %s" % (on_failure, ", ".join(_ON_FAILURE)))
        if not (meta is True or meta is False or meta is None or callable(meta)):
            raise ValueError("snapd: meta: want True (step, epoch, latest metrics), False, or a callable returning a dict")
        self.state_dir = os.fspath(state_dir)
        self.requester = requester
        self.on_failure = on_failure
        self.meta = meta
        self._log = None
        self.requested = []  # (gen, path) in request order
        self.requested_meta = {}  # gen -> the metadata requested with it
        self.resumed_from = None  # declared on the first request after a resume
        self._resumed_at = None

    def _resume_start(self, step):
        """The framework restored the run at step (a resume from its
        checkpoint): the first request after it declares resumed_from=step
        when snapd has that generation (its newest request is done), so
        the numbers the run re-uses chain to it instead of failing as
        re-used; otherwise the requests go as they are."""
        if step >= 1:
            self._resumed_at = int(step)

    def _meta(self, fields, *hook_args):
        if not self.meta:
            return None
        extra = self.meta(*hook_args) if callable(self.meta) else None
        return auto_meta(fields, extra)

    def _request(self, gen, path, meta=None):
        if self._log is None:
            self._log = RequestLog(os.path.join(self.state_dir, "wal"), self.requester)
        resumed, self._resumed_at = self._resumed_at, None
        if resumed is not None and gen > resumed and _newest_outcome(os.path.join(self.state_dir, "wal"), resumed) == "done":
            self.resumed_from = resumed
        else:
            resumed = None
        request_snapshot(gen, path, log=self._log, on_failure=self.on_failure, meta=meta or None, resumed_from=resumed)
        self.requested.append((gen, path))
        self.requested_meta[gen] = dict(meta or {})

    def close(self):
        if self._log is not None:
            self._log.close()
            self._log = None


class SnapdTrainerCallback(_CallbackBase):
    """Hugging Face Trainer callback: snapshot every checkpoint the Trainer saves.

        trainer = Trainer(..., callbacks=[snapd_trainer.SnapdTrainerCallback("/data/snapd")])

    on_save (called by the Trainer right after it wrote
    OUTPUT_DIR/checkpoint-STEP) requests a snapshot of that directory as
    generation STEP (state.global_step), on the main process only
    (state.is_world_process_zero), with metadata: step, epoch and the
    newest value of every number the Trainer logged (state.log_history:
    loss, learning_rate, grad_norm, eval_loss, ...); meta=False sends none,
    meta=callable(args, state) adds (and overrides) keys of its own.
    snapd reads the directory as it is:
    keep it until the request is done (save_total_limit deletes old
    checkpoints; keep the limit above what the daemon may lag behind).
    A run resumed with train(resume_from_checkpoint=...) starts at the
    checkpoint's step R (on_train_begin): its first request declares
    resumed_from=R when snapd has generation R, so the steps it saves
    again chain to R (the abandoned ones stay in snapd's history).
    An instance subclasses transformers.TrainerCallback when transformers
    is importable.
    """

    def __new__(cls, *args, **kwargs):
        return object.__new__(_with_base(cls, "hf", [("transformers", "TrainerCallback")]))

    def on_train_begin(self, args, state, control, **kwargs):
        # Trainer.train(resume_from_checkpoint=...) has loaded the
        # checkpoint's TrainerState before this hook: global_step > 0.
        if getattr(state, "is_world_process_zero", True):
            self._resume_start(int(getattr(state, "global_step", 0) or 0))
        return None

    def on_save(self, args, state, control, **kwargs):
        if not getattr(state, "is_world_process_zero", True):
            return None
        step = int(state.global_step)
        path = os.path.join(args.output_dir, "checkpoint-%d" % step)
        if step < 1 or not os.path.isdir(path):
            warnings.warn(SnapshotWarning("snapd: no checkpoint directory %s for step %d: not requested" % (path, step)), stacklevel=2)
            return None
        self._request(step, os.path.abspath(path), self._meta(self._fields(state), args, state))
        return None

    @staticmethod
    def _fields(state):
        f = {}
        # Oldest first, so the newest logged value of each name wins.
        for entry in getattr(state, "log_history", None) or []:
            if isinstance(entry, dict):
                f.update((k, v) for k, v in entry.items() if k not in ("step", "epoch"))
        f["step"] = int(state.global_step)
        epoch = getattr(state, "epoch", None)
        if epoch is not None:
            f["epoch"] = epoch
        return f

    def on_train_end(self, args, state, control, **kwargs):
        self.close()
        return None


class SnapdLightningCallback(_CallbackBase):
    """PyTorch Lightning callback: snapshot every checkpoint file the Trainer saves.

        trainer = L.Trainer(callbacks=[ModelCheckpoint(...), snapd_trainer.SnapdLightningCallback("/data/snapd")])

    Lightning calls on_save_checkpoint(trainer, pl_module, checkpoint)
    while building the checkpoint dict, before the file is written, and
    tells no callback the path. So that hook only records the intent
    (generation = trainer.global_step, and the identity — inode, size,
    mtime — of the files the checkpoint callbacks point at), and the next
    hook that runs after the write — on_train_batch_start/end,
    on_train_epoch_end, on_validation_end, the next on_save_checkpoint,
    on_fit_end, teardown — requests the file that changed: the
    ModelCheckpoint's last saved file (its _last_checkpoint_saved), else
    best_model_path (only if written since the intent), else
    last_model_path. Symlinks (save_last="link") are resolved. Rank zero only
    (trainer.is_global_zero); one request per generation. A step without
    a changed file (trainer.save_checkpoint to a path of your own) stays
    pending and is reported at teardown. Wrapping
    ModelCheckpoint._save_checkpoint would know the path at once but
    patches a private method; the hooks above are public.
    snapd reads the file as it is: a last.ckpt rewritten in place before
    the daemon read it fails or snapshots the newer bytes — prefer
    save_top_k=-1 or a symlinked last.
    Metadata: step, epoch and trainer.callback_metrics as they were at the
    save (scalars only; "val/loss" becomes key "val.loss"); meta=False
    sends none, meta=callable(trainer, pl_module, checkpoint) adds keys.
    A run resumed with fit(ckpt_path=...) starts at the checkpoint's step
    R (on_train_start): its first request declares resumed_from=R when
    snapd has generation R.
    An instance subclasses Lightning's Callback when lightning (or
    pytorch_lightning) is importable.
    """

    def __new__(cls, *args, **kwargs):
        return object.__new__(_with_base(cls, "lightning", [("lightning.pytorch", "Callback"), ("pytorch_lightning", "Callback")]))

    def __init__(self, state_dir=".snapd", requester=None, on_failure="warn", meta=True):
        _CallbackBase.__init__(self, state_dir, requester, on_failure, meta)
        self._intents = []   # (gen, ns, {path: identity}, meta)
        self._done = set()

    @staticmethod
    def _candidates(trainer):
        cbs = getattr(trainer, "checkpoint_callbacks", None)
        if cbs is None:
            cb = getattr(trainer, "checkpoint_callback", None)
            cbs = [cb] if cb is not None else []
        out = []
        for cb in cbs:
            # The file just written first; a top-k file (never rewritten)
            # before last.ckpt (rewritten in place by every save).
            for attr in ("_last_checkpoint_saved", "best_model_path", "last_model_path"):
                p = getattr(cb, attr, None)
                if p:
                    out.append((attr, os.fspath(p)))
        return out

    @staticmethod
    def _ident(path):
        try:
            st = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def _flush(self, trainer):
        if not self._intents:
            return
        keep = []
        for gen, ns, before, meta in self._intents:
            if gen in self._done:
                continue
            path = None
            for attr, p in self._candidates(trainer):
                ident = self._ident(p)
                if ident is None or ident == before.get(p):
                    continue
                if attr == "best_model_path" and ident[3] < ns - 2 * 10**9:
                    continue  # an older best file, not this save (2 s: coarse file clocks)
                path = os.path.realpath(p)
                break
            if path is None:
                keep.append((gen, ns, before, meta))
                continue
            self._done.add(gen)
            self._request(gen, path, meta)
        self._intents = keep

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self._flush(trainer)  # an earlier save's file is complete by now
        if not getattr(trainer, "is_global_zero", True):
            return
        gen = int(checkpoint.get("global_step", trainer.global_step)) if isinstance(checkpoint, dict) else int(trainer.global_step)
        if gen < 1:
            warnings.warn(SnapshotWarning("snapd: checkpoint at step %d: generations start at 1, not requested" % gen), stacklevel=2)
            return
        if gen in self._done:
            return
        before = {p: self._ident(p) for _, p in self._candidates(trainer)}
        fields = dict(getattr(trainer, "callback_metrics", None) or {})
        fields["step"] = gen
        epoch = getattr(trainer, "current_epoch", None)
        if epoch is not None:
            fields["epoch"] = epoch
        # Read now: the metrics are those of this save, not of the hook
        # that finds the file.
        self._intents.append((gen, time.time_ns(), before, self._meta(fields, trainer, pl_module, checkpoint)))

    def on_train_start(self, trainer, pl_module, *args, **kwargs):
        # fit(ckpt_path=...) has restored the loops before this hook:
        # global_step > 0.
        if getattr(trainer, "is_global_zero", True):
            self._resume_start(int(getattr(trainer, "global_step", 0) or 0))

    def on_train_batch_start(self, trainer, pl_module, *args, **kwargs):
        self._flush(trainer)

    def on_train_batch_end(self, trainer, pl_module, *args, **kwargs):
        self._flush(trainer)

    def on_train_epoch_end(self, trainer, pl_module, *args, **kwargs):
        self._flush(trainer)

    def on_validation_end(self, trainer, pl_module, *args, **kwargs):
        self._flush(trainer)

    def on_fit_end(self, trainer, pl_module, *args, **kwargs):
        self._flush(trainer)

    def teardown(self, trainer, pl_module, stage=None, *args, **kwargs):
        self._flush(trainer)
        for gen, _, _, _ in self._intents:
            warnings.warn(SnapshotWarning("snapd: no saved checkpoint file found for step %d: not requested" % gen), stacklevel=2)
        self._intents = []
        self.close()
