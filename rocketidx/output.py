"""A build's output directory: staging, the manifest, and the atomic commit; local or through pyarrow.fs.

Local layout (a path; the in-process build and the Spark build). Layout seen by readers:
``OUT/index/<files>``, ``OUT/_manifest.json``, ``OUT/_SUCCESS``. Underneath, ``index`` and
``_manifest.json`` are fixed symlinks through ``OUT/current``, itself a symlink to one
version directory ``OUT/.v-<id>/`` holding that build's ``index/`` and manifest. A build fills a new
version directory (the staging area); :func:`commit` renames its files to their final names, writes its
manifest, and then swaps ``current`` with one atomic rename. A reader therefore sees the old output or the
new one, whole; a crash leaves only an unreferenced ``.v-*`` directory, which the next build removes.
``OUT/.lock`` keeps two builds from interleaving.

Remote layout (a URI pyarrow.fs opens: ``hdfs://``, ``s3://``, ``file://``; :class:`RemoteOutput`). HDFS
and object stores have neither symlinks nor flock, so the pointer is a file::

    OUT/CURRENT                      one line: the committed version directory's name (".v-<id>")
    OUT/.v-<id>/index/<files>        that build's IndexFiles
    OUT/.v-<id>/_manifest.json       its manifest
    OUT/_SUCCESS                     written after CURRENT
    OUT/.lock                        while a build runs: owner, host, pid, start time (JSON)

A reader reads ``OUT/CURRENT``, then ``OUT/<version>/_manifest.json`` and ``OUT/<version>/index/``
(:func:`read_manifest_uri`). The commit names the staged files, writes the manifest, then writes
``CURRENT`` in one piece: a single PUT on an object store (atomic there), elsewhere a temporary file moved
over it (a rename on a local disk; on HDFS pyarrow's move deletes the old ``CURRENT`` first, so a reader
that finds none should retry). Only then is the previous version deleted, so a failed or killed build
leaves the previous output whole. The lock is advisory: a lock object created only if absent, then read
back after a pause to confirm the owner. Two builds starting within that pause can both miss each other,
as no pyarrow.fs store offers create-if-absent; a killed driver leaves it behind, and the error says to
delete it.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from rocketidx.errors import StoreLayoutError, StoreLockedError
from rocketidx.indexfile import FileInfo
from rocketidx.manifest import CURRENT, CURRENT_FILE, INDEX_DIR, MANIFEST, VERSION_PREFIX, Manifest, version_named
from rocketidx import interrupts, storage
from rocketidx.paths import is_uri, join_uri
from rocketidx.windows import assign_file_names

SUCCESS = "_SUCCESS"
LOCK = ".lock"
MOVE_THREADS = 8  # concurrent moves at a remote commit

log = logging.getLogger(__name__)
TASKS_DIR = "_tasks"  # task attempts' scratch directories under a staging version directory


@contextmanager
def output_lock(out: str | os.PathLike):
    """Hold ``OUT/.lock`` exclusively for the build; a second build fails at once with a clear error."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise StoreLayoutError(str(out), "exists and is not a directory: --out names the output directory")
    created = [d for d in (out, *out.parents) if not d.exists()]  # removed again if nothing is committed
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise StoreLockedError(str(out), "another rocketidx build is writing this output") from e
        yield
    finally:
        if created and not (out / CURRENT).is_symlink():
            _remove_created(out, created)
        os.close(fd)


def _remove_created(out: Path, created: list[Path]) -> None:
    """A build that made ``out`` and committed nothing leaves no trace: its lock file and the directories
    it created go (a directory something else put files in stays)."""
    try:
        (out / LOCK).unlink()
    except FileNotFoundError:
        pass
    for d in created:
        try:
            d.rmdir()
        except OSError:
            return


def _current_version(out: Path) -> str | None:
    cur = out / CURRENT
    return os.readlink(cur) if cur.is_symlink() else None


def new_staging(out: str | os.PathLike) -> Path:
    """A fresh version directory under ``OUT``; versions no pointer refers to (crash leftovers) go first."""
    out = Path(out)
    for link in (INDEX_DIR, MANIFEST):
        p = out / link
        if p.exists() and not p.is_symlink():
            raise StoreLayoutError(str(p), "exists and was not written by rocketidx; choose an empty --out")
    if (out / CURRENT_FILE).is_file():
        raise StoreLayoutError(str(out / CURRENT_FILE), "this output has the remote layout (a CURRENT file, as "
                                                        "earlier releases wrote file:// outputs): readers read it, a "
                                                        "build does not replace it; choose another --out")
    keep = _current_version(out)
    for old in out.glob(VERSION_PREFIX + "*"):
        if old.name != keep:
            shutil.rmtree(old, ignore_errors=True)
    staging = out / f"{VERSION_PREFIX}{uuid.uuid4().hex[:12]}"
    (staging / INDEX_DIR).mkdir(parents=True)
    return staging


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (renames, new files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _symlink_atomic(target: str, link: Path) -> None:
    tmp = link.with_name(link.name + f".tmp-{uuid.uuid4().hex[:8]}")
    os.symlink(target, tmp)
    os.replace(tmp, link)


def order_files(files: list[FileInfo]) -> list[FileInfo]:
    return sorted(files, key=lambda f: (f.window_id, f.seq))


def commit(out: str | os.PathLike, staging: str | os.PathLike, files: list[FileInfo], manifest: dict, tz,
           name_after: str | None = None, sources: dict[str, str] | None = None) -> dict:
    """Name the staged files, write the manifest, then point ``OUT/current`` at the new version.

    ``files`` are the staged files in ``staging/index`` (any order), or wherever ``sources`` (staged name ->
    path) says; ``manifest`` is the build's header, to which the :class:`rocketidx.manifest.Manifest` adds
    the ``files`` rows. Anything else in the version directory (task scratch directories) is removed before
    the commit point. Returns the manifest written, as plain JSON values (what ``build_index`` returns).
    A Ctrl-C or SIGTERM meanwhile waits until the commit is finished (:func:`rocketidx.interrupts.deferred`).
    """
    with interrupts.deferred():
        return _commit(Path(out), Path(staging), files, manifest, tz, name_after, sources)


def _commit(out: Path, staging: Path, files: list[FileInfo], manifest: dict, tz, name_after: str | None,
            sources: dict[str, str] | None) -> dict:
    files = order_files(files)
    names = assign_file_names([f.header.begin_timestamp for f in files], tz, after=name_after)
    rows = []
    for f, name in zip(files, names):
        src = Path((sources or {}).get(f.name, staging / INDEX_DIR / f.name))
        if not src.exists():
            raise FileNotFoundError(f"staged index file missing: {src}")
        os.rename(src, staging / INDEX_DIR / name)
        rows.append(f.committed_as(name))
    for extra in staging.iterdir():
        if extra.name != INDEX_DIR:
            shutil.rmtree(extra, ignore_errors=True)
    written = Manifest.build(manifest, rows)
    _write_atomic(staging / MANIFEST, written.to_json())
    fsync_dir(staging / INDEX_DIR)
    fsync_dir(staging)
    previous = _current_version(out)
    if (out / SUCCESS).exists():
        (out / SUCCESS).unlink()
    _symlink_atomic(staging.name, out / CURRENT)  # the commit point
    for link in (INDEX_DIR, MANIFEST):
        if not (out / link).is_symlink():
            _symlink_atomic(f"{CURRENT}/{link}", out / link)
    fsync_dir(out)
    _write_atomic(out / SUCCESS, "")
    if previous and previous != staging.name:
        shutil.rmtree(out / previous, ignore_errors=True)
    return written.to_dict()


def open_manifest(out: str | os.PathLike) -> Manifest | None:
    """The committed :class:`Manifest` of a local output, or of a URI's (through ``OUT/CURRENT``); None
    if there is none."""
    from rocketidx.indexfile import _pinned
    out = storage.normalize(out)
    if is_uri(out):
        return RemoteOutput.from_uri(out).manifest()
    return Manifest.read(_pinned(out))


def read_manifest(out: str | os.PathLike) -> dict | None:
    """:func:`open_manifest` as plain JSON values (what ``build_index`` returned for it)."""
    m = open_manifest(out)
    return None if m is None else m.to_dict()


@dataclass(frozen=True)
class Staging:
    """A version directory being filled: its path on the output's filesystem, and how tasks reach it
    (``uri``: the URI of a remote output's version, the same path for a local one)."""

    path: str
    uri: str

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def where(self, *parts: str) -> str:
        """A path under the version directory, as a user would be told it (URI or local path)."""
        return join_uri(self.uri, *parts) if is_uri(self.uri) else os.path.join(self.uri, *parts)


class LocalOutput:
    """A build output on a local (or mounted) path: the local layout of the module docstring, behind the
    same interface as :class:`RemoteOutput` (lock, new_staging, file_size, commit, discard, remove)."""

    def __init__(self, out: str | os.PathLike):
        self.out = Path(out)
        self.uri = str(out)

    def path(self, *parts: str) -> str:
        return os.path.join(self.out, *parts)

    def lock(self):
        return output_lock(self.out)

    def new_staging(self) -> Staging:
        staging = str(new_staging(self.out))
        return Staging(staging, staging)

    def file_size(self, path: str) -> int | None:
        return os.stat(path).st_size if os.path.isfile(path) else None

    def remove(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def discard(self, staging: Staging) -> None:
        """Remove a staged version, unless it is the committed one (a commit that finished before the
        error or interrupt that unwinds the build)."""
        if _current_version(self.out) != staging.name:
            self.remove(staging.path)

    def commit(self, staging: Staging, files: list[FileInfo], manifest: dict, tz, name_after: str | None = None,
               sources: dict[str, str] | None = None) -> dict:
        return commit(self.out, staging.path, files, manifest, tz, name_after=name_after, sources=sources)

    def read_manifest(self) -> dict | None:
        return read_manifest(self.out)


def open_output(out: str | os.PathLike) -> "LocalOutput | RemoteOutput":
    """The build output at ``out``: a local path (or ``file://`` URI), or any URI pyarrow.fs opens."""
    out = storage.normalize(out)
    return RemoteOutput.from_uri(out) if is_uri(out) else LocalOutput(out)


@contextmanager
def built_here(out: str | os.PathLike):
    """Where an in-process build writes ``out``: ``out`` itself when it is local; for a URI, a local
    scratch output, whose committed version is published to ``out`` (:meth:`RemoteOutput.publish`) when
    the build inside the block succeeds. The remote output's lock is held throughout, so a build to a URI
    is refused at once when another one is writing it, and a failed or killed build leaves the previous
    remote output as it was (at worst a staged version no pointer names, which the next build removes)."""
    out = storage.normalize(out)
    if not is_uri(out):
        yield out
        return
    remote = RemoteOutput.from_uri(out)
    with remote.lock():
        scratch = tempfile.mkdtemp(prefix="rocketidx-out-", dir=_scratch_dir())
        try:
            yield scratch
            remote.publish(scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _scratch_dir() -> str:
    """Local scratch space: the first of ``SPARK_LOCAL_DIRS`` (a task's), else the system temp directory."""
    return (os.environ.get("SPARK_LOCAL_DIRS") or tempfile.gettempdir()).split(",")[0]


class TaskFiles:
    """Where one task attempt writes its files under a version directory (``location``: its path or URI).

    ``local`` is a directory on this machine to build the files in: the version directory itself when it
    is a local (or mounted) path, else a scratch directory whose files :meth:`publish` uploads, because
    HDFS and object stores cannot update a file in place.
    """

    def __init__(self, location: str, task_dir: str):
        location = storage.normalize(location)
        self.remote = RemoteOutput.from_uri(location) if is_uri(location) else None
        if self.remote is None:
            self.local = os.path.join(location, task_dir)
            os.makedirs(self.local)
            return
        self.target = self.remote.path(task_dir)
        self.remote.fs.create_dir(self.target, recursive=True)
        self.local = tempfile.mkdtemp(prefix="rocketidx-write-", dir=_scratch_dir())

    def publish(self, names: list[str]) -> None:
        """Make the closed files ``names`` (in :attr:`local`) visible at the task's location."""
        if self.remote is None:
            return
        for name in names:
            src = os.path.join(self.local, name)
            with open(src, "rb") as f, self.remote.fs.open_output_stream(f"{self.target}/{name}") as out:
                shutil.copyfileobj(f, out, 8 * 1024**2)
            os.unlink(src)

    def discard(self) -> None:
        """Remove what this attempt wrote (it failed); a failure to remove is logged, not raised, as the
        attempt's own error is the one to report."""
        shutil.rmtree(self.local, ignore_errors=True)
        if self.remote is not None:
            try:
                self.remote.remove(self.target)
            except OSError as e:
                log.warning("could not remove the failed task's files %s: %s", self.target, e)

    def close(self) -> None:
        if self.remote is not None:
            shutil.rmtree(self.local, ignore_errors=True)


# --- remote outputs (pyarrow.fs) -------------------------------------------------------------------

# Object stores whose single PUT replaces an object atomically; elsewhere CURRENT goes through a move.
PUT_ATOMIC = frozenset({"s3", "gcs", "abfs"})
# Between writing the lock object and reading it back: a second build that saw no lock just before our
# write has this long to overwrite it, and then we see its owner and stop.
LOCK_SETTLE_S = 1.0


class RemoteOutput:
    """A build output on a ``pyarrow.fs.FileSystem``: the remote layout of the module docstring."""

    def __init__(self, fs, root: str, uri: str | None = None):
        self.fs = fs
        self.root = root.rstrip("/")
        self.uri = uri or self.root

    @classmethod
    def from_uri(cls, uri: str) -> RemoteOutput:
        fs, root = storage.filesystem(uri)
        return cls(fs, root, uri)

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def exists(self, path: str) -> bool:
        import pyarrow.fs as pafs
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def _put(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(path) as f:
            f.write(data)

    def _get(self, path: str) -> bytes | None:
        """The file's bytes, None if there is none (asked first: not every store maps that to ENOENT)."""
        if not self.exists(path):
            return None
        with self.fs.open_input_stream(path) as f:
            return f.read()

    def move(self, src: str, dst: str) -> None:
        """Move a file (a rename on HDFS and local disks, a server-side copy and delete on object stores)."""
        try:
            self.fs.move(src, dst)
        except NotImplementedError:  # e.g. Azure without a hierarchical namespace
            self.fs.copy_file(src, dst)
            self.fs.delete_file(src)

    def _check_layout(self) -> None:
        for name in (INDEX_DIR, MANIFEST):  # a local build's symlinks, or someone else's files
            if self.exists(self.path(name)):
                raise StoreLayoutError(storage.redact(join_uri(self.uri, name)), "exists and was not written by a rocketidx "
                                       "build to a URI (those keep it under OUT/.v-<id>/); choose an empty --out")

    def _read_lock(self) -> dict:
        data = self._get(self.path(LOCK))
        if data is None:
            return {}
        try:
            return json.loads(data)
        except ValueError:  # not ours to parse (an empty local flock file, a partial write)
            return {"owner": None}

    @contextmanager
    def lock(self, settle_s: float = LOCK_SETTLE_S):
        """Hold ``OUT/.lock`` for the build (advisory); a second build fails with :class:`StoreLockedError`."""
        self._check_layout()
        self.fs.create_dir(self.root, recursive=True)
        mine = {"owner": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(),
                "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        held = self._read_lock()
        if not held:
            self._put(self.path(LOCK), json.dumps(mine).encode())
            time.sleep(settle_s)
            held = self._read_lock()
            if held.get("owner") == mine["owner"]:
                held = None
        if held is not None:
            who = (f"held by {held.get('host')} pid {held.get('pid')} since {held.get('since')}"
                   if held.get("owner") else "of unknown owner")
            raise StoreLockedError(storage.redact(self.uri), f"another rocketidx build is writing this output (lock object "
                                             f"{storage.redact(join_uri(self.uri, LOCK))} {who}); if no build is running, "
                                             "a killed one left it: delete it and run again")
        try:
            yield
        finally:
            try:
                if self._read_lock().get("owner") == mine["owner"]:
                    self.fs.delete_file(self.path(LOCK))
            except OSError as e:
                log.warning("could not remove the lock object %s (%s); delete it before the next build",
                            storage.redact(join_uri(self.uri, LOCK)), e)

    def current_version(self) -> str | None:
        """The committed version directory's name, from ``OUT/CURRENT``; None before the first commit."""
        data = self._get(self.path(CURRENT_FILE))
        if data is None:
            return None
        return version_named(data, storage.redact(join_uri(self.uri, CURRENT_FILE)))

    def new_staging(self) -> Staging:
        """A fresh version directory; versions ``CURRENT`` does not name go first: the one it named before
        (kept for the readers of the previous build) and crash leftovers."""
        import pyarrow.fs as pafs
        self._check_layout()
        keep = self.current_version() or self._recover_current()
        for info in self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True)):
            if info.base_name.startswith(VERSION_PREFIX) and info.base_name != keep:
                self.discard(Staging(info.path, join_uri(self.uri, info.base_name)))
            elif info.base_name.startswith(CURRENT_FILE + ".tmp-"):
                self.fs.delete_file(info.path)
        name = f"{VERSION_PREFIX}{uuid.uuid4().hex[:12]}"
        self.fs.create_dir(self.path(name, INDEX_DIR), recursive=True)
        return Staging(self.path(name), join_uri(self.uri, name))

    def _recover_current(self) -> str | None:
        """``CURRENT`` back from a pointer move that was cut short, else None.

        Where a move over an existing file is a delete and a rename (HDFS), a build killed between the two
        leaves no ``CURRENT`` but its temporary pointer, naming a complete version: that version was being
        committed and the previous one may be gone already, so it becomes current rather than garbage.
        """
        import pyarrow.fs as pafs
        for info in self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True)):
            if not info.base_name.startswith(CURRENT_FILE + ".tmp-"):
                continue
            name = (self._get(info.path) or b"").decode().strip()
            if name.startswith(VERSION_PREFIX) and "/" not in name and self.exists(self.path(name, MANIFEST)):
                self.fs.move(info.path, self.path(CURRENT_FILE))
                log.warning("%s was missing; restored it from %s (a commit cut short) naming %s",
                            storage.redact(join_uri(self.uri, CURRENT_FILE)), info.base_name, name)
                return name
        return None

    def discard(self, staging: Staging) -> None:
        """Delete a version directory, if it is there and ``CURRENT`` does not name it (a commit that
        finished before the error or interrupt that unwinds the build)."""
        if self.current_version() != staging.name:
            self.remove(staging.path)

    def remove(self, path: str) -> None:
        """Delete a directory on the output's filesystem, if it is there."""
        if self.exists(path):
            self.fs.delete_dir(path)

    def file_size(self, path: str) -> int | None:
        """The size of a file on the output's filesystem; None when there is no such file."""
        import pyarrow.fs as pafs
        info = self.fs.get_file_info(path)
        return int(info.size) if info.type == pafs.FileType.File else None

    def _write_current(self, version: str) -> None:
        data = (version + "\n").encode()
        if self.fs.type_name in PUT_ATOMIC:
            self._put(self.path(CURRENT_FILE), data)
            return
        tmp = self.path(f"{CURRENT_FILE}.tmp-{uuid.uuid4().hex[:8]}")
        self._put(tmp, data)
        self.fs.move(tmp, self.path(CURRENT_FILE))

    def commit(self, staging: Staging, files: list[FileInfo], manifest: dict, tz,
               name_after: str | None = None, sources: dict[str, str] | None = None) -> dict:
        """Name the staged files, write the manifest, then point ``OUT/CURRENT`` at the new version.

        As :func:`commit`: ``files`` are the staged files in ``staging/index`` (any order), or wherever
        ``sources`` (staged name -> path on the filesystem) says; returns the manifest. Each file is moved
        once, straight to its final name, several at a time: on an object store a move is a server-side
        copy of the whole file, which a driver issuing one at a time would wait on for minutes.
        """
        with interrupts.deferred():
            return self._commit(staging, files, manifest, tz, name_after, sources)

    def _commit(self, staging: Staging, files: list[FileInfo], manifest: dict, tz, name_after: str | None,
                sources: dict[str, str] | None) -> dict:
        from concurrent.futures import ThreadPoolExecutor
        files = order_files(files)
        names = assign_file_names([f.header.begin_timestamp for f in files], tz, after=name_after)
        index = f"{staging.path}/{INDEX_DIR}"
        moves = []
        for f, name in zip(files, names):
            src = (sources or {}).get(f.name, f"{index}/{f.name}")
            if not self.exists(src):
                raise FileNotFoundError(f"staged index file missing: {src}")
            moves.append((src, f"{index}/{name}"))
        with ThreadPoolExecutor(MOVE_THREADS) as pool:
            list(pool.map(lambda m: self.move(*m), moves))  # list(): a failed move raises here
        import pyarrow.fs as pafs
        for info in self.fs.get_file_info(pafs.FileSelector(staging.path)):
            if info.base_name != INDEX_DIR:  # task scratch directories: not part of the version
                self.remove(info.path)
        written = Manifest.build(manifest, [f.committed_as(name) for f, name in zip(files, names)])
        self._point_at(staging, written)
        return written.to_dict()

    def _point_at(self, staging: Staging, written: Manifest) -> None:
        """Write the version's manifest, then make it the current one (the commit point).

        Every object of the version is complete by then: a PUT or a move returns once the store holds
        the whole object, which is an object store's (and HDFS's) durability; there is no fsync to call.
        The version ``CURRENT`` named before stays until the next build starts (:meth:`new_staging`), so
        a reader that resolved it a moment ago finishes its reads there.
        """
        self._put(f"{staging.path}/{MANIFEST}", written.to_json().encode())
        if self.exists(self.path(SUCCESS)):
            self.fs.delete_file(self.path(SUCCESS))
        self._write_current(staging.name)  # the commit point
        self._put(self.path(SUCCESS), b"")

    def publish(self, local_out: str) -> dict:
        """Copy the version committed in the local output ``local_out`` to a new version here and commit
        it (the in-process build to a URI); returns the manifest. Files keep their names and bytes."""
        manifest = Manifest.read(local_out)
        if manifest is None:
            raise StoreLayoutError(local_out, "no committed build to publish")
        staging = self.new_staging()
        try:
            for name in manifest.names:
                with open(os.path.join(local_out, INDEX_DIR, name), "rb") as src, \
                        self.fs.open_output_stream(f"{staging.path}/{INDEX_DIR}/{name}") as dst:
                    shutil.copyfileobj(src, dst, 8 * 1024**2)
            with interrupts.deferred():
                self._point_at(staging, manifest)
        except BaseException:
            self.discard(staging)
            raise
        return manifest.to_dict()

    def index_path(self) -> str | None:
        """The committed ``index`` directory's path on ``fs``; None before the first commit."""
        version = self.current_version()
        return self.path(version, INDEX_DIR) if version else None

    def manifest(self) -> Manifest | None:
        """The committed :class:`Manifest` (``OUT/CURRENT`` -> ``OUT/<version>/_manifest.json``); None
        before the first commit."""
        version = self.current_version()
        if not version:
            return None
        where = storage.redact(join_uri(self.uri, version, MANIFEST))
        data = self._get(self.path(version, MANIFEST))
        if data is None:
            raise StoreLayoutError(where, f"missing: {CURRENT_FILE} names a version without a manifest")
        return Manifest.from_json(data, where)

    def read_manifest(self) -> dict | None:
        """:meth:`manifest` as plain JSON values."""
        m = self.manifest()
        return None if m is None else m.to_dict()


def read_manifest_uri(uri: str) -> dict | None:
    """The manifest of the build committed at ``uri`` (``OUT/CURRENT`` -> ``OUT/<version>/_manifest.json``),
    as plain JSON values."""
    return RemoteOutput.from_uri(uri).read_manifest()
