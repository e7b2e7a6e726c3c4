"""Where bytes live: a local path or a URI, opened through one set of calls.

In: a path string (``/data/store``, ``file:///data/store``, ``s3://bucket/store``, ``hdfs://nn/store``).
Out: listings, small files read whole, files read by byte range, and read-only mappings of ranges; for local
files a build writes, kernel copies that keep holes, writeback started early, and syncs run together.
Stays true: this is the one place that decides how a path is opened. A plain path and a ``file://`` URI
are the local disk (``os`` calls: sparse files, symlinks, ``pread``); any other scheme goes through
``pyarrow.fs.FileSystem.from_uri``, so credentials and endpoints come from the environment the ecosystem's
way (``AWS_*`` and ``AWS_ENDPOINT_URL`` for ``s3://``, URI options such as ``?region=``, Hadoop's
configuration and ``CLASSPATH`` for ``hdfs://``). Nothing here prints or logs a URI's options, which may
hold keys: :func:`redact` is what a message shows.

Remote reads are counted (:data:`READS`): a query is a few ranged reads of an IndexFile, never a
download, and ``-v`` and the bench report what it cost.
"""
from __future__ import annotations

import functools
import mmap
import os
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
import re
from urllib.parse import unquote, urlsplit, urlunsplit

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(path: str | os.PathLike) -> bool:
    """A path with a scheme (``hdfs://``, ``s3://``, ``file://``): opened through pyarrow.fs."""
    return isinstance(path, str) and _SCHEME.match(path) is not None


def join_uri(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended to its path; a query (``?region=...``) stays at the end."""
    u = urlsplit(uri)
    return urlunsplit(u._replace(path="/".join([u.path.rstrip("/"), *parts])))


FILE, DIR = "file", "dir"
FETCH_CHUNK = 8 * 1024**2  # a remote range is copied in pieces of this size
BLOCK = 4096  # a remote file's small reads are whole blocks of this size, kept for the next read
CACHED_BLOCKS = 1024  # blocks a remote RangeFile keeps (4 MiB)


def normalize(path: str | os.PathLike) -> str:
    """``path`` as the rest of rocketidx takes it: a ``file://`` URI becomes its local path (so a
    ``file://`` output is written like any local one: sparse, with the local layout), anything else a
    string as given."""
    s = os.fspath(path)
    if isinstance(s, str) and s[:7].lower() == "file://":
        u = urlsplit(s)
        if u.netloc not in ("", "localhost"):
            from rocketidx.errors import StoreLayoutError
            raise StoreLayoutError(s, "a file:// URI names a path on this machine (file:///path); "
                                      f"host {u.netloc!r} is not this one")
        return unquote(u.path) or "/"
    return str(s)


def resolve(path: str | os.PathLike) -> str:
    """``path`` as a command takes it once, at its entry: :func:`normalize`, then a local path made absolute
    against this process's working directory. Spark tasks run in their own working directory (a local
    master's Python workers in the JVM's, which need not be the driver's), and a manifest outlives the
    directory a build was typed in, so a relative path means what the user meant only here. Symlinks are
    kept as named (no ``realpath``): the path a user gave is the one reported. URIs stay as they are."""
    s = normalize(path)
    return s if is_uri(s) else os.path.abspath(s)


def is_remote(path: str | os.PathLike) -> bool:
    """Whether ``path`` is read through pyarrow.fs (a URI other than ``file://``)."""
    return is_uri(normalize(path))


def redact(path: str | os.PathLike) -> str:
    """``path`` fit to print, log or store: a URI loses its options (``?access_key=...``) and any
    ``user:password@`` in its host part."""
    s = os.fspath(path)
    if not is_uri(s):
        return str(s)
    u = urlsplit(s)
    host = u.netloc.rsplit("@", 1)[-1]
    return urlunsplit(u._replace(netloc=host, query="", fragment=""))


_FS: dict[tuple[str, str, str], tuple[object, str, str]] = {}
_FS_LOCK = threading.Lock()


def filesystem(uri: str):
    """``(pyarrow filesystem, its path for uri)``; one filesystem per scheme, host and options, made once
    (``FileSystem.from_uri`` sets up a client, which a query opening a dozen files should not pay for
    each time)."""
    import pyarrow.fs as pafs
    u = urlsplit(uri)
    key = (u.scheme.lower(), u.netloc, u.query)
    here = u.path.rstrip("/")
    with _FS_LOCK:
        known = _FS.get(key)
    if known is not None and here:
        fs, first_path, first_fs_path = known
        return fs, first_fs_path[:len(first_fs_path) - len(first_path)] + here
    fs, fs_path = pafs.FileSystem.from_uri(uri)
    fs_path = fs_path.rstrip("/") or fs_path
    # Kept when the filesystem path is some prefix (an S3 bucket; nothing on HDFS) and then the URI's path.
    if here and fs_path.endswith(here):
        with _FS_LOCK:
            _FS.setdefault(key, (fs, here, fs_path))
    return fs, fs_path


@dataclass(frozen=True)
class Entry:
    """One directory entry: ``path`` as the caller opens it again (a local path, or a URI)."""

    name: str
    path: str
    kind: str  # FILE or DIR
    size: int


class ReadCounter:
    """Bytes and requests read from remote storage in this process (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.bytes = 0
        self.requests = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.bytes += n
            self.requests += 1

    def reset(self) -> None:
        with self._lock:
            self.bytes = self.requests = 0


READS = ReadCounter()


def join(path: str, *parts: str) -> str:
    """``path`` with ``parts`` appended, as a URI or a local path."""
    return join_uri(path, *parts) if is_uri(path) else os.path.join(path, *parts)


def parent(path: str) -> str:
    """The directory holding ``path`` (a URI's options kept)."""
    if not is_uri(path):
        return os.path.dirname(os.path.abspath(path))
    u = urlsplit(path)
    return urlunsplit(u._replace(path=u.path.rstrip("/").rsplit("/", 1)[0]))


def basename(path: str) -> str:
    return urlsplit(path).path.rstrip("/").rsplit("/", 1)[-1] if is_uri(path) else os.path.basename(path)


def _kind(info) -> str | None:
    import pyarrow.fs as pafs
    return {pafs.FileType.File: FILE, pafs.FileType.Directory: DIR}.get(info.type)


def stat(path: str | os.PathLike) -> Entry | None:
    """What is at ``path`` (symlinks followed); None if nothing is."""
    p = normalize(path)
    if is_uri(p):
        fs, fp = filesystem(p)
        info = fs.get_file_info(fp)
        kind = _kind(info)
        return None if kind is None else Entry(basename(p), p, kind, int(info.size or 0) if kind == FILE else 0)
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        return None
    import stat as st_mod
    kind = DIR if st_mod.S_ISDIR(st.st_mode) else FILE if st_mod.S_ISREG(st.st_mode) else None
    return None if kind is None else Entry(os.path.basename(p.rstrip("/")) or p, p, kind, st.st_size if kind == FILE else 0)


def listdir(path: str | os.PathLike) -> list[Entry]:
    """The files and directories directly under ``path``, by name (symlinks followed; others skipped)."""
    p = normalize(path)
    if is_uri(p):
        import pyarrow.fs as pafs
        fs, fp = filesystem(p)
        out = []
        for info in fs.get_file_info(pafs.FileSelector(fp)):
            kind = _kind(info)
            if kind is not None:
                out.append(Entry(info.base_name, join_uri(p, info.base_name), kind,
                                 int(info.size or 0) if kind == FILE else 0))
        return sorted(out, key=lambda e: e.name)
    out = []
    for e in os.scandir(p):
        try:
            kind = DIR if e.is_dir() else FILE if e.is_file() else None
            size = e.stat().st_size if kind == FILE else 0
        except FileNotFoundError:  # a dangling symlink, or removed while listing
            continue
        if kind is not None:
            out.append(Entry(e.name, e.path, kind, size))
    return sorted(out, key=lambda e: e.name)


def footprint(path: str) -> tuple[int, int]:
    """(bytes a file takes on its store, its size): a sparse local file takes only its written blocks, a
    remote object all of its bytes."""
    if is_remote(path):
        size = stat(path).size
        return size, size
    st = os.stat(normalize(path))
    return int(st.st_blocks) * 512, int(st.st_size)  # st_blocks counts 512-byte units on Linux and macOS


def readlink(path: str) -> str | None:
    """A local symlink's target; None for anything else (remote stores have no symlinks)."""
    return os.readlink(path) if not is_uri(path) and os.path.islink(path) else None


def read_bytes(path: str | os.PathLike) -> bytes | None:
    """A small file's bytes (a manifest, a pointer); None if there is no such file."""
    p = normalize(path)
    if is_uri(p):
        if stat(p) is None:  # asked first: not every store maps a missing object to ENOENT
            return None
        fs, fp = filesystem(p)
        with fs.open_input_stream(fp) as f:
            data = f.read()
        READS.add(len(data))
        return data
    try:
        with open(p, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


class RangeFile:
    """A file read by byte ranges: ``pread`` on a local file, ranged GETs (or their HDFS equivalent) on a
    remote one, each counted in :data:`READS`. Use as a context manager.

    Small remote reads go through a cache of :data:`BLOCK`-byte blocks (at most :data:`CACHED_BLOCKS`):
    a key query reads a header, a slot and a few chain items, each a request whose latency dwarfs its
    bytes, and queries that follow one another touch the same header and often the same blocks. Large
    reads (bulk scans) bypass it.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = normalize(path)
        self._fd = self._remote = None
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        if is_uri(self.path):
            fs, fp = filesystem(self.path)
            self._remote = fs.open_input_file(fp)
            self.size = int(self._remote.size())
        else:
            self._fd = os.open(self.path, os.O_RDONLY)
            self.size = os.fstat(self._fd).st_size

    def read_at(self, n: int, offset: int) -> bytes:
        """Up to ``n`` bytes at ``offset`` (fewer only where the file ends)."""
        if self._fd is not None:
            return os.pread(self._fd, n, offset)
        n = min(n, self.size - offset)
        if n <= 0:
            return b""
        first, last = offset // BLOCK, (offset + n - 1) // BLOCK
        if last - first > 1:
            return self._fetch(n, offset)
        data = b"".join(self._block(b) for b in range(first, last + 1))
        return data[offset - first * BLOCK:offset - first * BLOCK + n]

    def _block(self, b: int) -> bytes:
        data = self._blocks.get(b)
        if data is None:
            data = self._blocks[b] = self._fetch(min(BLOCK, self.size - b * BLOCK), b * BLOCK)
            if len(self._blocks) > CACHED_BLOCKS:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(b)
        return data

    def _fetch(self, n: int, offset: int) -> bytes:
        data = self._remote.read_at(n, offset)
        READS.add(len(data))
        return data

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._remote is not None:
            self._remote.close()
            self._remote = None
            self._blocks.clear()

    def __enter__(self) -> RangeFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def first_nonzero(path: str, offset: int, end: int, chunk: int = FETCH_CHUNK) -> int | None:
    """The offset of the first non-zero byte in ``[offset, end)`` of a file, or None; read in chunks
    (bounded memory however large the file), a local file's holes skipped with ``SEEK_DATA``."""
    import errno

    import numpy as np
    with RangeFile(path) as f:
        pos, seek_data = offset, f._fd is not None
        while pos < end:
            if seek_data:
                try:
                    pos = os.lseek(f._fd, pos, os.SEEK_DATA)
                except OSError as e:
                    if e.errno == errno.ENXIO:  # nothing but holes to the end
                        return None
                    seek_data = False  # no SEEK_DATA on this filesystem: read every byte
            if pos >= end:
                return None
            data = f.read_at(min(chunk, end - pos), pos)
            if not data:
                return None
            nz = np.flatnonzero(np.frombuffer(data, np.uint8))
            if len(nz):
                return pos + int(nz[0])
            pos += len(data)
    return None


def map_range(path: str | os.PathLike, size: int, lo: int = 0, hi: int | None = None):
    """A read-only mapping of a file of ``size`` bytes in which at least bytes ``[lo, hi)`` are its own.

    A local file is mapped as it is (empty bytes for an empty file). A remote file's range is copied into
    a sparse local scratch file first (bytes outside the range read as zeros and take no disk), because
    the record scanners want one buffer; the scratch file is unlinked at once, so the mapping holds the
    only reference and a killed process leaves nothing behind. Scratch space: the first of
    ``SPARK_LOCAL_DIRS``, else the system temp directory.
    """
    p = normalize(path)
    if size == 0:
        return b""
    if not is_uri(p):
        with open(p, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    hi = size if hi is None else min(size, hi)
    local_dir = (os.environ.get("SPARK_LOCAL_DIRS") or tempfile.gettempdir()).split(",")[0]
    fd, tmp = tempfile.mkstemp(prefix="rocketidx-seg-", dir=local_dir)
    try:
        os.ftruncate(fd, size)
        with RangeFile(p) as f:
            pos = lo
            while pos < hi:
                chunk = f.read_at(min(FETCH_CHUNK, hi - pos), pos)
                if not chunk:
                    break
                os.pwrite(fd, chunk, pos)
                pos += len(chunk)
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
        os.unlink(tmp)


__all__ = ["DIR", "FILE", "Entry", "READS", "RangeFile", "basename", "filesystem", "first_nonzero", "footprint", "is_remote", "join", "listdir",
           "map_range", "normalize", "parent", "read_bytes", "readlink", "redact", "resolve", "start_writeback", "stat"]


_SYNC_FILE_RANGE_WRITE = 2


@functools.cache
def _sync_file_range():
    """libc's ``sync_file_range`` (Linux), or None."""
    import ctypes  # here: 7 ms of every command's start otherwise
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    return fn


def start_writeback(fd: int) -> None:
    """Start writing a file's dirty pages to disk now, without waiting (``sync_file_range``, Linux): a file
    written by a task and synced only after the last task leaves little for that ``fsync`` to wait for. Only a
    head start: durability is still the fsync's; where the call is missing nothing happens."""
    fn = _sync_file_range()
    if fn is not None:
        fn(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def copy_sparse(src: str, dst: str) -> int:
    """``src`` copied to a new local file ``dst`` as it lies on disk: its data extents copied in the kernel
    (:func:`copy_range`), its holes left holes, the size kept. A queue file the writer made sparse is mostly
    hole until it fills, so a copy of what was written is a fraction of a full one, to write and to sync; the
    bytes read back are the same either way. Where the system cannot say where data lies (no ``SEEK_DATA``),
    every byte is copied. Returns the bytes copied."""
    with open(src, "rb") as fi, open(dst, "xb") as fo:
        size = os.fstat(fi.fileno()).st_size
        spans = data_spans(fi.fileno(), size)
        if spans is None:
            spans = [(0, size)] if size else []
        fo.truncate(size)
        for lo, hi in spans:
            copy_range(fi.fileno(), fo.fileno(), lo, hi, src)
        return sum(hi - lo for lo, hi in spans)


def copy_range(fd_in: int, fd_out: int, lo: int, hi: int, name: str) -> None:
    """Bytes ``lo`` to ``hi`` of ``fd_in`` to the same place in ``fd_out``: in the kernel (``copy_file_range``,
    no bytes through this process), read and written where the system has no such call for these files."""
    import errno
    kernel = hasattr(os, "copy_file_range")
    while lo < hi:
        if kernel:
            try:
                n = os.copy_file_range(fd_in, fd_out, hi - lo, lo, lo)
            except OSError as e:
                if e.errno not in (errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                kernel = False
                continue
        else:
            data = os.pread(fd_in, min(hi - lo, 8 << 20), lo)
            n = os.pwrite(fd_out, data, lo) if data else 0
        if n <= 0:
            raise OSError(f"{name}: ends before byte {lo} of the {hi} to copy")
        lo += n


def data_spans(fd: int, size: int) -> list[tuple[int, int]] | None:
    """The byte ranges of ``fd`` that hold data (``SEEK_DATA``/``SEEK_HOLE``); None where the system cannot say."""
    import errno
    if not hasattr(os, "SEEK_DATA"):
        return None
    spans, at = [], 0
    while at < size:
        try:
            lo = os.lseek(fd, at, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # only a hole from here to the end
                break
            if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return None
            raise
        hi = min(os.lseek(fd, lo, os.SEEK_HOLE), size)
        spans.append((lo, hi))
        at = hi
    return spans


SYNC_THREADS = 8


def sync_files(paths, dirs=()) -> None:
    """``fdatasync`` each of ``paths`` (files whose writers only started their writeback), and ``fsync`` each
    of ``dirs`` (new entries), several at once so their waits overlap; a build calls it before its commit can
    name them."""
    calls = [(p, os.fdatasync) for p in paths] + [(d, os.fsync) for d in dirs]

    def one(call) -> None:
        fd = os.open(call[0], os.O_RDONLY)
        try:
            call[1](fd)
        finally:
            os.close(fd)
    if len(calls) <= 1:
        for c in calls:
            one(c)
        return
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(min(SYNC_THREADS, len(calls))) as pool:
        list(pool.map(one, calls))
