"""Trainer-side helper for snapd (stdlib only, one file, importable).

Two calls a training loop needs:

    publish_generation(gens_dir, gen, data)   # atomic, immutable checkpoint file
    publish_generation_dir(gens_dir, gen, fill)  # or a directory (HF shards)
    request_snapshot(gen, path, state_dir)    # append one WAL line, ~microseconds

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

    snapreq/1 gen=<dec> ts=<unix ns> by=<requester> [rank=<dec> world_size=<dec>] [resumed_from=<dec>] src=<percent-escaped path> crc=<crc32c hex>\\n

with one os.write() on an O_APPEND file descriptor while holding a shared
flock on the segment, after checking (fstat + pread) that the segment is not
sealed (its last line is the seal marker "snapseal/1", or its write bit was
cleared by an older consumer). That is the whole
protocol; it lets any number of processes append at once without torn or
interleaved lines.

No fsync on the request path: a request survives the trainer crashing, not
the machine crashing (a torn line is detected by CRC and skipped by snapd).
"""

import errno
import fcntl
import os
import re
import stat
import time

__all__ = [
    "MAGIC",
    "MAX_GEN",
    "MAX_LINE_SIZE",
    "RequestLog",
    "crc32c",
    "encode_request",
    "publish_generation",
    "publish_generation_dir",
    "request_snapshot",
    "generation_name",
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


def _check_gen(gen):
    if gen < 1 or gen > MAX_GEN:
        raise ValueError("snapd: gen %d out of range 1..%d (at most 18 decimal digits)" % (gen, MAX_GEN))


def encode_request(gen, source, requester, ts_ns, rank=None, world_size=None, resumed_from=None):
    """Return the request line (bytes, newline included).

    rank and world_size (both or neither) mark one rank's shard of a
    sharded generation. resumed_from=R declares that the run restarted
    from generation R's checkpoint (1 <= R < gen).
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
    rk = _rank_fields(rank, world_size) + _resume_field(gen, resumed_from, world_size)
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
        self._escaped = {}
        os.makedirs(self.wal_dir, mode=0o775, exist_ok=True)  # less the umask, as wal/writer.go
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
            return
        raise OSError(errno.EAGAIN, "snapd: no open WAL segment in %s" % self.wal_dir)

    def append(self, gen, source, ts_ns=None, rank=None, world_size=None, resumed_from=None):
        """Append one request. Raises ValueError for bad input, OSError on I/O.

        rank and world_size (both or neither) mark one rank's shard of a
        sharded generation (the daemon must be configured with ranks:).
        resumed_from=R declares that the run restarted from generation R's
        checkpoint (see request_snapshot).
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
        rk = _rank_fields(rank, world_size) + _resume_field(gen, resumed_from, world_size)
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
                     resumed_from=None):
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
    """
    if log is not None:
        log.append(gen, path, ts_ns, rank=rank, world_size=world_size, resumed_from=resumed_from)
        return
    with RequestLog(os.path.join(os.fspath(state_dir), "wal"), requester) as lg:
        lg.append(gen, path, ts_ns, rank=rank, world_size=world_size, resumed_from=resumed_from)


def generation_name(gen, suffix=""):
    """The entry name of generation gen in the generations directory."""
    if suffix and (not suffix.startswith(".") or "/" in suffix):
        raise ValueError("snapd: suffix %r must start with '.' and contain no '/'" % suffix)
    return "gen-%06d%s" % (int(gen), suffix)


def publish_generation(gens_dir, gen, data, suffix=".safetensors"):
    """Atomically publish checkpoint bytes as generation gen; return its path.

    data is bytes-like, or a callable that receives the open binary file and
    writes the checkpoint into it. The file is written under a temporary
    dot-name in gens_dir, fsynced, hard-linked to gen-NNNNNN<suffix> (which
    fails if it exists: generations are immutable) and the directory is
    fsynced. Raises FileExistsError if generation gen is already published.
    """
    gens_dir = os.fspath(gens_dir)
    os.makedirs(gens_dir, exist_ok=True)
    name = generation_name(gen, suffix)
    prefix = generation_name(gen)
    for existing in os.listdir(gens_dir):
        if existing == prefix or existing.startswith(prefix + "."):
            raise FileExistsError(errno.EEXIST, "snapd: generation %d already published" % int(gen), os.path.join(gens_dir, existing))
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


def publish_generation_dir(gens_dir, gen, fill, suffix=""):
    """Atomically publish a checkpoint directory as generation gen.

    For sharded checkpoints (model.safetensors.index.json plus shards, e.g.
    model.save_pretrained(d, max_shard_size="2GB")) or several files: snapd
    reads the directory as one snapshot. fill(d) writes the files into the
    temporary directory d (a dot-name in gens_dir); every file and
    directory in it is then fsynced, d is renamed to gen-NNNNNN<suffix>
    and gens_dir is fsynced. Raises FileExistsError if generation gen is
    already published. Returns the final path.
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
        raise FileExistsError(errno.EEXIST, "snapd: generation %d already published" % int(gen), published())
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
            raise FileExistsError(errno.EEXIST, "snapd: generation %d already published" % int(gen), published())
        os.rename(tmp, final)
    except BaseException:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(gens_dir)
    return final
