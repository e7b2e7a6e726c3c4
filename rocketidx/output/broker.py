"""A broker's store as rocketidx meets it: its ``lock``, its ``checkpoint``, its ``abort`` file.

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
from pathlib import Path

import numpy as np

from rocketidx.errors import StoreLayoutError, StoreLockedError
import rocketidx.layout as L
from rocketidx.output.local import fsync_dir as _fsync_dir


CHECKPOINT_FIELD = "index_msg_timestamp_ms"


@contextmanager
def broker_lock(store: Path, create: bool = True):
    """Hold ``STORE/lock`` with both lock kinds; fail at once if another process holds either.

    The broker takes a POSIX record lock (Java's ``FileChannel.tryLock``); tools and scripts often use
    ``flock``. On Linux the two do not see each other, so both are taken.

    A store without a lock file has no running broker; ``create`` makes one so that a broker started
    meanwhile finds it held (a dry run creates nothing).
    """
    path = store / "lock"
    if not path.exists() and not create:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            raise StoreLockedError(str(path), "locked (POSIX lock): a broker is running on this store; stop it "
                                              "first") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
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
