"""A build's output directory: staging, the manifest, and the atomic commit.

Layout seen by readers: ``OUT/index/<files>``, ``OUT/_manifest.json``, ``OUT/_SUCCESS``. Underneath,
``index`` and ``_manifest.json`` are fixed symlinks through ``OUT/current``, itself a symlink to one
version directory ``OUT/.v-<id>/`` holding that build's ``index/`` and manifest. A build fills a new
version directory (the staging area); :func:`commit` renames its files to their final names, writes its
manifest, and then swaps ``current`` with one atomic rename. A reader therefore sees the old output or the
new one, whole; a crash leaves only an unreferenced ``.v-*`` directory, which the next build removes.
``OUT/.lock`` keeps two builds from interleaving.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path

from rocketidx.errors import StoreLayoutError, StoreLockedError
from rocketidx.indexfile import FileInfo
from rocketidx.windows import assign_file_names

MANIFEST = "_manifest.json"
SUCCESS = "_SUCCESS"
INDEX_DIR = "index"
LOCK = ".lock"
VERSION_PREFIX = ".v-"
CURRENT = "current"
MANIFEST_VERSION = 1


@contextmanager
def output_lock(out: str | os.PathLike):
    """Hold ``OUT/.lock`` exclusively for the build; a second build fails at once with a clear error."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise StoreLockedError(str(out), "another rocketidx build is writing this output") from e
        yield
    finally:
        os.close(fd)


def _current_version(out: Path) -> str | None:
    cur = out / CURRENT
    return os.readlink(cur) if cur.is_symlink() else None


def new_staging(out: str | os.PathLike) -> Path:
    """A fresh version directory under ``OUT``; versions no pointer refers to (crash leftovers) go first."""
    out = Path(out)
    keep = _current_version(out)
    for old in out.glob(VERSION_PREFIX + "*"):
        if old.name != keep:
            shutil.rmtree(old, ignore_errors=True)
    for link in (INDEX_DIR, MANIFEST):
        p = out / link
        if p.exists() and not p.is_symlink():
            raise StoreLayoutError(str(p), "exists and was not written by rocketidx; choose an empty --out")
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


def _fsync_dir(path: Path) -> None:
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


def commit(out: str | os.PathLike, staging: Path, files: list[FileInfo], manifest: dict, tz,
           name_after: str | None = None) -> dict:
    """Name the staged files, write the manifest, then point ``OUT/current`` at the new version.

    ``files`` are the staged files (any order); ``manifest`` gets the ``files`` list added. Returns it.
    """
    out = Path(out)
    files = order_files(files)
    names = assign_file_names([f.header.begin_timestamp for f in files], tz, after=name_after)
    rows = []
    for f, name in zip(files, names):
        src = staging / INDEX_DIR / f.name
        if not src.exists():
            raise FileNotFoundError(f"staged index file missing: {src}")
        os.rename(src, staging / INDEX_DIR / name)
        row = f.as_row()
        row["name"] = name
        row["entries"] = f.entries
        rows.append(row)
    manifest = dict(manifest, files=rows)
    _write_atomic(staging / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    _fsync_dir(staging / INDEX_DIR)
    _fsync_dir(staging)
    previous = _current_version(out)
    if (out / SUCCESS).exists():
        (out / SUCCESS).unlink()
    _symlink_atomic(staging.name, out / CURRENT)  # the commit point
    for link in (INDEX_DIR, MANIFEST):
        if not (out / link).is_symlink():
            _symlink_atomic(f"{CURRENT}/{link}", out / link)
    _fsync_dir(out)
    _write_atomic(out / SUCCESS, "")
    if previous and previous != staging.name:
        shutil.rmtree(out / previous, ignore_errors=True)
    return manifest


def read_manifest(out: str | os.PathLike) -> dict | None:
    p = Path(out) / MANIFEST
    if not p.exists():
        return None
    return json.loads(p.read_text())
