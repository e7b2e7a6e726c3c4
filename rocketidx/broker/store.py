"""A broker's store as rocketidx meets it: a :class:`BrokerStore` (its paths, ``lock``, ``checkpoint``, ``abort``
file, CommitLog segments and topic table), opened once by an operation and passed down.

In: ``STORE`` (a local directory a broker writes). Out: the lock held for the length of a repair
(:func:`broker_lock`), whether someone else holds it now (:func:`lock_state`, which changes nothing), the
checkpoint's fields (:func:`read_checkpoint`) and the two rocketidx moves after a repair
(:func:`write_checkpoint_fields`: indexMsgTimestamp, logicsMsgTimestamp).

Stays true: nothing here creates a file unless asked to (a check or a dry run leaves the store as it was);
the checkpoint is written through a temporary file, fsync and rename, its other fields untouched.
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rocketidx.commitlog.segments import Segment, list_segments
from rocketidx.errors import StoreLayoutError, StoreLockedError
import rocketidx.layout as L
from rocketidx.output.local import fsync_dir as _fsync_dir


CHECKPOINT_FIELD = "index_msg_timestamp_ms"


@dataclass(frozen=True)
class BrokerStore:
    """One broker's store directory: where each of its areas lies, and what reads or changes them. Opened once
    (:meth:`open`: a directory with ``commitlog/``) by the operation, then passed down, so every layer names
    the same paths the same way."""

    root: Path

    @classmethod
    def open(cls, store: "str | os.PathLike | BrokerStore") -> "BrokerStore":
        if isinstance(store, BrokerStore):
            return store
        root = Path(store)
        if not root.is_dir():
            raise StoreLayoutError(str(root), "no such store directory (no commitlog/ to read)")
        if not (root / "commitlog").is_dir():
            raise StoreLayoutError(str(root), "no commitlog/ directory: not a broker's store")
        return cls(root)

    def __str__(self) -> str:
        return str(self.root)

    def __fspath__(self) -> str:  # os and pathlib take it where a path goes
        return str(self.root)

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    @property
    def commitlog(self) -> Path:
        return self.root / "commitlog"

    @property
    def index(self) -> Path:
        return self.root / "index"

    @property
    def consumequeue(self) -> Path:
        return self.root / "consumequeue"

    @property
    def crashed(self) -> bool:
        """The ``abort`` file is there: the broker did not stop cleanly (or runs)."""
        return (self.root / "abort").exists()

    def segments(self, from_offset: int | None = None) -> list[Segment]:
        return list_segments(self.commitlog, from_offset=from_offset)

    def checkpoint(self) -> dict | None:
        return read_checkpoint(self.root)

    def lock(self, create: bool = True):
        return broker_lock(self.root, create)

    def lock_state(self) -> str:
        return lock_state(self.root)

    def write_checkpoint(self, values: dict[str, int]) -> None:
        write_checkpoint_fields(self.root, values)

    def queue_store_kind(self) -> str:
        return queue_store_kind(self.root)

    def batch_topics(self) -> set[str]:
        return batch_topics(self.root)


@contextmanager
def broker_lock(store: Path, create: bool = True):
    """Hold ``STORE/lock`` with both lock kinds; fail at once if another process holds either.

    The broker takes a POSIX record lock (Java's ``FileChannel.tryLock``); tools and scripts often use
    ``flock``. On Linux the two do not see each other, so both are taken.

    A store without a lock file has no running broker; ``create`` makes one so that a broker started
    meanwhile finds it held. Without ``create`` (a dry run, a plan) the lock is taken shared, through a
    read-only open: a plan needs only read access, and still fails at once while a broker runs.
    """
    path = store / "lock"
    if not path.exists() and not create:
        yield
        return
    shared = not create
    fd = os.open(path, os.O_RDONLY) if shared else os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        try:
            fcntl.lockf(fd, kind | fcntl.LOCK_NB)
        except OSError as e:
            raise StoreLockedError(str(path), "locked (POSIX lock): a broker is running on this store; stop it "
                                              "first") from e
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except OSError as e:
            raise StoreLockedError(str(path), "locked (flock): another process holds this store's lock; stop "
                                              "it first") from e
        yield
    finally:
        os.close(fd)


def read_checkpoint(store: Path) -> dict | None:
    p = store / "checkpoint"
    if not p.exists():
        return None
    raw = p.read_bytes()
    if len(raw) < L.CHECKPOINT.itemsize:
        raise StoreLayoutError(str(p), f"checkpoint is {len(raw)} bytes, expected at least {L.CHECKPOINT.itemsize}")
    rec = np.frombuffer(raw[:L.CHECKPOINT.itemsize], L.CHECKPOINT)[0]
    return {name: int(rec[name]) for name in L.CHECKPOINT.names}


def write_checkpoint_index_ts(store: Path, index_msg_ts: int) -> None:
    """Set indexMsgTimestamp (byte 16) and nothing else."""
    write_checkpoint_fields(store, {CHECKPOINT_FIELD: index_msg_ts})


def write_checkpoint_fields(store: Path, values: dict[str, int]) -> None:
    """Set the named checkpoint fields (``L.CHECKPOINT``'s names) and nothing else; temporary file, fsync,
    rename. A store without a checkpoint gets one of the broker's size, its other fields 0."""
    p = store / "checkpoint"
    raw = bytearray(p.read_bytes()) if p.exists() else bytearray(L.CHECKPOINT_FILE_SIZE)
    for name, value in values.items():
        at = L.CHECKPOINT.fields[name][1]
        raw[at:at + 8] = int(value).to_bytes(8, "big", signed=True)
    tmp = p.with_name("checkpoint.rocketidx-tmp")
    with open(tmp, "wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)
    _fsync_dir(store)


def lock_state(store: Path) -> str:
    """``absent`` (no lock file: no broker ever ran here, or it was removed), ``free``, or ``held (POSIX
    lock)`` / ``held (flock)``: probed without creating the file and released at once."""
    path = store / "lock"
    if not path.exists():
        return "absent"
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return "held (POSIX lock)"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return "held (flock)"
        return "free"
    finally:
        os.close(fd)


# --- what a broker's store holds that rocketidx does not rebuild (yet) -------------------------------------

BATCH_CQ = L.BATCH_CQ


def queue_store_kind(store: Path) -> str:
    """``rocksdb`` when ``consumequeue/`` holds a RocksDB database (a 5.x broker with
    ``storeType=defaultRocksDB`` keeps its queues there: a ``CURRENT`` file and ``*.sst`` files directly
    inside), ``files`` otherwise (ConsumeQueue files, or no directory)."""
    from rocketidx.consumequeue.rocksdb import is_rocksdb
    return "rocksdb" if is_rocksdb(store / "consumequeue") else "files"


def batch_topics(store: Path) -> set[str]:
    """Topics whose attribute ``queue.type`` is ``BatchCQ`` in the store's ``config/topics.json``
    (:func:`rocketidx.config.batch_topics_of`); a store without the file has none."""
    from rocketidx.config import batch_topics_of
    path = store / "config" / "topics.json"
    return set(batch_topics_of(path)) if path.is_file() else set()
