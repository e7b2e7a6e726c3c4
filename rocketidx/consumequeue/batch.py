"""Batch consume queues (``queue.type=BatchCQ`` topics, 5.x): dispatched records -> ``<dir>/<topic>/<queueId>/
<20-digit byte position>`` files of 46-byte units, as ``BatchConsumeQueue.putBatchMessagePositionInfo`` writes
them.

In: a segment's bytes and a batch of its records (CommitLog order), the topics the broker's topic config
marks BatchCQ, and the file size (``mapperFileSizeBatchConsumeQueue``, default 300,000 units). Out: each
queue's files and a :class:`BatchQueueInfo` per queue.

Stays true (docs/formats.md, "Batch consume queues"): a record of such a topic makes no ConsumeQueue entry
and, when its transaction type is NOT_TYPE or COMMIT, one unit: the stored PHYSICALOFFSET, TOTALSIZE, tagsCode
(TAGS' hash, or 0), STORETIMESTAMP, the base offset (``INNER_BASE`` when both ``INNER_NUM`` and ``INNER_BASE``
are there, else QUEUEOFFSET), the batch size (``INNER_NUM`` then, else 1), -1 and 0; units are appended from
byte 0 of the queue's first file whatever its base (no blank fill), a file holds whole units, files are
created at full size (zeros past the last unit), and a unit whose physical offset is not above the queue's
last one, or whose base or size is negative, is skipped.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

import rocketidx.layout as L
from rocketidx.arrays import gather_ranges, queue_groups
from rocketidx.commitlog.dispatch import entry_mask, parse_longs_at, tags_codes, topics_of
from rocketidx.commitlog.records import property_ranges
from rocketidx.commitlog.segments import Segment
from rocketidx.consumequeue.writer import check_topic, file_name

BATCH_DIR = L.BATCH_CQ_DIR
BATCH_UNIT = np.dtype([("phy_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"), ("store_time", ">i8"),
                       ("base", ">i8"), ("batch_size", ">i2"), ("compacted", ">i4"), ("reserved", ">i4")])
assert BATCH_UNIT.itemsize == L.BATCH_CQ_UNIT_SIZE
DEFAULT_BATCH_FILE_SIZE = L.DEFAULT_BATCH_CQ_FILE_SIZE
SHORT = (-(1 << 15), (1 << 15) - 1)


def store_batch_file_size(directory: str | os.PathLike, given: int | None = None) -> int:
    """The batch consume queue file size of a store's ``batchconsumequeue/``: the size most of its files
    share, else ``given`` (the broker conf's mapperFileSizeBatchConsumeQueue), else the default."""
    from collections import Counter
    from pathlib import Path
    root = Path(directory)
    sizes = Counter(p.stat().st_size for p in root.glob("*/*/*") if p.is_file()) if root.is_dir() else None
    return sizes.most_common(1)[0][0] if sizes else int(given or DEFAULT_BATCH_FILE_SIZE)


class BatchDispatched(NamedTuple):
    """The units of a batch of records of BatchCQ topics, one row per record that makes one, CommitLog order."""

    topics: list[str]
    topic_index: np.ndarray  # int32, into ``topics``
    queue_id: np.ndarray  # int32
    units: np.ndarray  # BATCH_UNIT
    position: np.ndarray  # int64, the record's segment offset (for errors)


def dispatch_batch(buf, seg: Segment, recs: np.ndarray, batch_topics: frozenset[str],
                   topics: tuple[list[str], np.ndarray] | None = None) -> BatchDispatched:
    """The units ``recs`` dispatch to batch consume queues: those of the records of ``batch_topics`` that make
    an entry (NOT_TYPE or COMMIT). ``topics``: :func:`topics_of` of the same records, where the caller has it."""
    u8 = np.frombuffer(buf, np.uint8, seg.size)
    topics, topic_index = topics if topics is not None else topics_of(u8, recs)
    rows = np.flatnonzero(np.asarray([t in batch_topics for t in topics], bool)[topic_index]) \
        if len(recs) else np.zeros(0, np.int64)
    rows = rows[entry_mask(recs, rows)]
    sub = recs[rows]
    units = np.zeros(len(rows), BATCH_UNIT)
    units["phy_offset"] = sub[:, L.REC_PHY]
    units["size"] = sub[:, L.REC_TOTAL]
    units["tags_code"] = tags_codes(u8, sub)
    units["store_time"] = sub[:, L.REC_STORE_TS]
    units["base"] = sub[:, L.REC_QUEUE_OFFSET]
    units["batch_size"] = 1
    units["compacted"] = -1
    if len(rows):
        _inner_batches(u8, sub, units)
    return BatchDispatched(topics, topic_index[rows], sub[:, L.REC_QUEUE_ID].astype(np.int32), units,
                           sub[:, L.REC_POS].astype(np.int64))


def _inner_batches(u8: np.ndarray, sub: np.ndarray, units: np.ndarray) -> None:
    """``setBatchSizeIfNeeded``: with both INNER_NUM and INNER_BASE, base = Long.parseLong(INNER_BASE) and
    batch size = Short.parseShort(INNER_NUM). The record check has already stopped reading before a record
    whose values those parses reject (rocketidx.commitlog.javaparse), as the broker's check does."""
    # The kernel found both values while each record was in cache; the numpy path (MULTI_DISPATCH -1) did not.
    known = sub[:, L.REC_MULTI_DISPATCH] >= 0
    if known.all():
        data = u8
        num_at, num_len = sub[:, L.REC_INNER_NUM_POS], sub[:, L.REC_INNER_NUM_LEN]
        base_at, base_len = sub[:, L.REC_INNER_BASE_POS], sub[:, L.REC_INNER_BASE_LEN]
        has_num, has_base = num_at >= 0, base_at >= 0
    else:
        data, offs = gather_ranges(u8, sub[:, L.REC_PROPS_POS], np.maximum(sub[:, L.REC_PROPS_LEN], 0))
        found = property_ranges(data, offs, [L.PROPERTY_INNER_NUM, L.PROPERTY_INNER_BASE])
        has_num, num_at, num_len = found[L.PROPERTY_INNER_NUM]
        has_base, base_at, base_len = found[L.PROPERTY_INNER_BASE]
    both = np.flatnonzero(has_num & has_base)
    if not len(both):
        return
    base, bad_base = parse_longs_at(data, base_at[both], base_len[both])
    num, bad_num = parse_longs_at(data, num_at[both], num_len[both])
    ok = ~bad_base & ~bad_num & (num >= SHORT[0]) & (num <= SHORT[1])
    units["base"][both[ok]] = base[ok]
    units["batch_size"][both[ok]] = num[ok]


@dataclass
class BatchQueueInfo:
    """One batch consume queue as written: its files oldest first, its first and next message offsets
    (``minOffsetInQueue``: the first unit's base; ``maxOffsetInQueue``: the last unit's base + batch size)
    and its units."""

    topic: str
    queue_id: int
    files: list[str]
    min_offset: int
    max_offset: int
    units: int

    def as_dict(self) -> dict:
        return {"topic": self.topic, "queue_id": self.queue_id, "files": self.files, "min_offset": self.min_offset,
                "max_offset": self.max_offset, "units": self.units}


class _BatchQueue:
    def __init__(self, directory: str, file_size: int):
        self.directory, self.file_size = directory, file_size
        self.per_file = file_size // BATCH_UNIT.itemsize
        self.units = 0  # appended so far
        self.last_phy = -1  # maxMsgPhyOffsetInCommitLog
        self.first_base: int | None = None
        self.next_offset = 0

    def append(self, units: np.ndarray) -> int:
        """Append what the skip rule keeps; returns the units kept."""
        phy = units["phy_offset"].astype(np.int64)
        usable = (units["base"] >= 0) & (units["batch_size"] >= 0)
        # A unit is appended when its offset is above every offset appended before it: the running maximum
        # of the usable units before it (a skipped unit's offset never raises that maximum).
        before = np.maximum.accumulate(np.concatenate([[self.last_phy], np.where(usable, phy, -1)]))[:-1]
        kept = units[usable & (phy > before)]
        if not len(kept):
            return 0
        self.last_phy = int(kept["phy_offset"][-1])
        if self.first_base is None:
            self.first_base = int(kept["base"][0])
        self.next_offset = int(kept["base"][-1]) + int(kept["batch_size"][-1])
        os.makedirs(self.directory, exist_ok=True)
        data = memoryview(kept.tobytes())
        at, unit = self.units, BATCH_UNIT.itemsize
        while len(data):
            f, slot = divmod(at, self.per_file)
            n = min(len(data) // unit, self.per_file - slot)
            path = os.path.join(self.directory, file_name(f * self.file_size))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                if slot == 0:
                    os.ftruncate(fd, self.file_size)
                if os.pwrite(fd, data[:n * unit], slot * unit) != n * unit:
                    raise OSError(f"{path}: short write")
            finally:
                os.close(fd)
            at, data = at + n, data[n * unit:]
        self.units = at
        return len(kept)

    def files(self) -> list[str]:
        return [file_name(i * self.file_size) for i in range((self.units + self.per_file - 1) // self.per_file)]


class BatchQueueWriter:
    """Writes every batch consume queue under ``directory`` (``OUT/<version>/batchconsumequeue``)."""

    def __init__(self, directory: str, file_size: int = DEFAULT_BATCH_FILE_SIZE):
        if file_size < BATCH_UNIT.itemsize:
            raise ValueError(f"a batch consume queue file of {file_size} bytes holds no 46-byte unit")
        self.directory, self.file_size = directory, file_size
        self.queues: dict[tuple[str, int], _BatchQueue] = {}
        self.skipped = 0

    def add(self, seg: Segment, d: BatchDispatched) -> None:
        if not len(d.units):
            return
        for idx in queue_groups(d.topic_index, d.queue_id):
            first = int(idx[0])
            topic, qid = d.topics[int(d.topic_index[first])], int(d.queue_id[first])
            queue = self.queues.get((topic, qid))
            if queue is None:
                check_topic(topic, seg, int(d.position[first]))
                queue = self.queues[(topic, qid)] = _BatchQueue(os.path.join(self.directory, topic, str(qid)),
                                                                 self.file_size)
            self.skipped += len(idx) - queue.append(d.units[idx])

    def close(self, sync: bool = True) -> list[BatchQueueInfo]:
        infos = []
        for (topic, qid), q in sorted(self.queues.items()):
            if not q.units:
                continue
            if sync:
                for name in q.files():
                    _fsync(os.path.join(q.directory, name))
                _fsync(q.directory)
            infos.append(BatchQueueInfo(topic, qid, q.files(), q.first_base, q.next_offset, q.units))
        for topic in {i.topic for i in infos} if sync else ():
            _fsync(os.path.join(self.directory, topic))
        if infos and sync:
            _fsync(self.directory)
        return infos


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lookup_batch(directory: str | os.PathLike, topic: str, queue_id: int, offset: int) -> tuple[int, ...] | None:
    """The unit a broker's ``getBatchMsgIndexBuffer(offset)`` finds in ``directory/<topic>/<queueId>/`` (a
    ``batchconsumequeue/``): the one with the largest base offset at or below ``offset`` (so an offset inside a
    batch finds its batch), as (phy_offset, size, tags_code, store_time, base, batch_size); None below the
    queue's first base, at or past its last base + batch size, or where there is no such queue."""
    qdir = os.path.join(directory, topic, str(queue_id))
    if not os.path.isdir(qdir):
        return None
    units = np.concatenate([np.fromfile(os.path.join(qdir, n), BATCH_UNIT) for n in sorted(os.listdir(qdir))
                            if n.isdigit()] or [np.zeros(0, BATCH_UNIT)])
    units = units[(units["size"] > 0) & (units["batch_size"] > 0) & (units["base"] >= 0)]  # recover()'s test
    if not len(units) or offset < units["base"][0] or offset >= units["base"][-1] + units["batch_size"][-1]:
        return None
    u = units[int(np.searchsorted(units["base"], offset, side="right")) - 1]
    return (int(u["phy_offset"]), int(u["size"]), int(u["tags_code"]), int(u["store_time"]), int(u["base"]),
            int(u["batch_size"]))
