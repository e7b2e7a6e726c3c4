"""A build output behind a URI pyarrow.fs opens (``hdfs://``, ``s3://``, ``gs://``, ``file://``).

HDFS and object stores have neither symlinks nor flock, so the pointer is a file::

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

import logging
import json
import os
import shutil
import socket
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone

from rocketidx.errors import StoreLayoutError, StoreLockedError
from rocketidx.index.writer import FileInfo
from rocketidx.output.manifest import (CONSUMEQUEUE_DIR, CURRENT_FILE, INDEX_DIR, MANIFEST, VERSION_PREFIX, Manifest, ManifestFile, version_named)
from rocketidx.index.windows import assign_file_names
import rocketidx.interrupts as interrupts
from rocketidx.output.local import LOCK, SUCCESS, Staging, order_files
from rocketidx.storage import join_uri
import rocketidx.storage as storage

log = logging.getLogger(__name__)


MOVE_THREADS = 8  # concurrent moves at a remote commit
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
            if info.base_name not in (INDEX_DIR, CONSUMEQUEUE_DIR):  # task scratch directories: not the version's
                self.remove(info.path)
        written = Manifest.build(manifest, [ManifestFile.committed(f, name) for f, name in zip(files, names)])
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
            names = [f"{INDEX_DIR}/{name}" for name in manifest.names]
            for q in (manifest.header.get("consumequeues") or {}).get("queues", []):
                names += [f"{CONSUMEQUEUE_DIR}/{q['topic']}/{q['queue_id']}/{name}" for name in q["files"]]
            for name in names:
                with open(os.path.join(local_out, name), "rb") as src, \
                        self.fs.open_output_stream(f"{staging.path}/{name}") as dst:
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
