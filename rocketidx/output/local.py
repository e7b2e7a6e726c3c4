"""A build's output directory on a local disk: staging, the lock, and the atomic commit.

Layout seen by readers: ``OUT/index/<files>``, ``OUT/_manifest.json``, ``OUT/_SUCCESS``. Underneath,
``index`` and ``_manifest.json`` are fixed symlinks through ``OUT/current``, itself a symlink to one
version directory ``OUT/.v-<id>/`` holding that build's ``index/`` and manifest. A build fills a new
version directory (the staging area); :func:`commit` renames its files to their final names, writes its
manifest, and then swaps ``current`` with one atomic rename. A reader therefore sees the old output or the
new one, whole; a crash leaves only an unreferenced ``.v-*`` directory, which the next build removes.
``OUT/.lock`` keeps two builds from interleaving. A URI's output: :mod:`rocketidx.output.remote`.
"""
from __future__ import annotations

import fcntl
import logging
import os
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rocketidx.errors import StoreLayoutError, StoreLockedError
from rocketidx.index.writer import FileInfo
import rocketidx.layout as L
from rocketidx.output.manifest import (CONSUMEQUEUE_DIR, CURRENT, CURRENT_FILE, INDEX_DIR, MANIFEST, VERSION_PREFIX, Manifest, ManifestFile)
from rocketidx.index.windows import assign_file_names
import rocketidx.interrupts as interrupts
from rocketidx.storage import is_uri, join_uri


SUCCESS = "_SUCCESS"
LOCK = ".lock"
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




def same_bytes(a: str | os.PathLike, b: str | os.PathLike, chunk: int = 1 << 22) -> bool:
    """Whether two files hold the same bytes (sizes first, then 4 MiB at a time: a repair compares a
    store's files with their rebuild this way, ~1 GB/s from the page cache, where ``filecmp`` reads 8 KiB)."""
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
        while True:
            x = fa.read(chunk)
            if x != fb.read(chunk):
                return False
            if not x:
                return True


def _symlink_atomic(target: str, link: Path) -> None:
    tmp = link.with_name(link.name + f".tmp-{uuid.uuid4().hex[:8]}")
    os.symlink(target, tmp)
    os.replace(tmp, link)


def order_files(files: list[FileInfo]) -> list[FileInfo]:
    return sorted(files, key=lambda f: (f.window_id, f.seq))


def commit(out: str | os.PathLike, staging: str | os.PathLike, files: list[FileInfo], manifest: dict, tz,
           name_after: str | None = None, sources: dict[str, str] | None = None,
           fixed_names: dict[str, str] | None = None) -> dict:
    """Name the staged files, write the manifest, then point ``OUT/current`` at the new version.

    ``files`` are the staged files in ``staging/index`` (any order), or wherever ``sources`` (staged name ->
    path) says; ``manifest`` is the build's header, to which the :class:`rocketidx.output.manifest.Manifest` adds
    the ``files`` rows. Anything else in the version directory (task scratch directories) is removed before
    the commit point. Returns the manifest written, as plain JSON values (what ``build_index`` returns).
    A Ctrl-C or SIGTERM meanwhile waits until the commit is finished (:func:`rocketidx.interrupts.deferred`).
    ``fixed_names``: staged name -> committed name of files that keep the name an earlier build gave them (an
    incremental build's carried prefix of a one-sequence output); they come first, the others are named after.
    """
    with interrupts.deferred():
        return _commit(Path(out), Path(staging), files, manifest, tz, name_after, sources, fixed_names or {})


def _commit(out: Path, staging: Path, files: list[FileInfo], manifest: dict, tz, name_after: str | None,
            sources: dict[str, str] | None, fixed: dict[str, str]) -> dict:
    files = order_files(files)
    kept = [fixed[f.name] for f in files[:len(fixed)] if f.name in fixed]
    if len(kept) != len(fixed):
        raise StoreLayoutError(str(staging), "files that keep their names must come first")
    names = kept + assign_file_names([f.header.begin_timestamp for f in files[len(kept):]], tz,
                                     after=kept[-1] if kept else name_after)
    rows = []
    for f, name in zip(files, names):
        src = Path((sources or {}).get(f.name, staging / INDEX_DIR / f.name))
        if not src.exists():
            raise FileNotFoundError(f"staged index file missing: {src}")
        os.rename(src, staging / INDEX_DIR / name)
        rows.append(ManifestFile.committed(f, name))
    for extra in staging.iterdir():
        if extra.name not in (INDEX_DIR, CONSUMEQUEUE_DIR, L.BATCH_CQ_DIR):
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
    queues = (staging / CONSUMEQUEUE_DIR).is_dir()
    if queues and not (out / CONSUMEQUEUE_DIR).is_symlink():
        _symlink_atomic(f"{CURRENT}/{CONSUMEQUEUE_DIR}", out / CONSUMEQUEUE_DIR)
    elif not queues and (out / CONSUMEQUEUE_DIR).is_symlink():
        (out / CONSUMEQUEUE_DIR).unlink()  # this build wrote no ConsumeQueue: no link into nothing
    batches = (staging / L.BATCH_CQ_DIR).is_dir()
    if batches and not (out / L.BATCH_CQ_DIR).is_symlink():
        _symlink_atomic(f"{CURRENT}/{L.BATCH_CQ_DIR}", out / L.BATCH_CQ_DIR)
    elif not batches and (out / L.BATCH_CQ_DIR).is_symlink():
        (out / L.BATCH_CQ_DIR).unlink()
    fsync_dir(out)
    _write_atomic(out / SUCCESS, "")
    if previous and previous != staging.name:
        shutil.rmtree(out / previous, ignore_errors=True)
    return written.to_dict()


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
        # Absolute: the staging path goes to tasks, which may run in another working directory.
        self.out = Path(os.path.abspath(out))
        self.uri = str(self.out)

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
               sources: dict[str, str] | None = None, fixed_names: dict[str, str] | None = None) -> dict:
        return commit(self.out, staging.path, files, manifest, tz, name_after=name_after, sources=sources,
                      fixed_names=fixed_names)

    def read_manifest(self) -> dict | None:
        from rocketidx.output.open import _pinned
        m = Manifest.read(_pinned(self.out))
        return None if m is None else m.to_dict()
