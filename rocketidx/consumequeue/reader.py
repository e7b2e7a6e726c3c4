"""ConsumeQueue files -> the answers a restarted broker gives: ``ConsumeQueue.get(queueOffset)``.

In: a ``consumequeue`` directory (``<topic>/<queueId>/<20-digit files>``) and the CommitLog's minimum offset
(its first segment's base offset). Out: :class:`ConsumeQueues`: each queue's files, its slots after the
broker's ``recover`` and ``correctMinOffset``, and :meth:`ConsumeQueues.get`.

Stays true (docs/formats.md, "ConsumeQueue entries", Lookups): the answer is the slot at ``queueOffset * 20``, or
None when the offset is negative, below the queue's minimum, at or past its last written slot, or the
queue does not exist. The maximum is where ``recover`` stops (the first entry, from the third file before
the last on, with a negative offset or a size <= 0); the minimum is ``correctMinOffset``'s, step by step,
binary search included. The queue file size is what the files say (all one size), never a flag.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

import rocketidx.layout as L
from rocketidx.errors import CorruptRecordError, StoreLayoutError

UNIT = L.CQ_UNIT.itemsize


@dataclass
class Queue:
    """One queue's files (oldest first) and its slots as a restarted broker sees them (bytes of logical offset)."""

    topic: str
    queue_id: int
    directory: str
    offsets: list[int]  # each file's fileFromOffset
    file_size: int
    max_offset: int = 0  # after recover: where the valid entries end
    max_physic: int = -1  # after recover: offset + size of the last valid entry (maxPhysicOffset), -1 if none
    min_offset: int = 0  # after correctMinOffset
    _cache: dict = field(default_factory=dict, repr=False)

    def path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:0{L.CQ_NAME_DIGITS}d}")

    def units(self, file_offset: int) -> np.ndarray:
        """A whole file's slots (cached: lookups come in runs over one queue)."""
        got = self._cache.get(file_offset)
        if got is None:
            with open(self.path(file_offset), "rb") as f:
                data = f.read()
            if len(data) != self.file_size:
                raise CorruptRecordError(self.path(file_offset), len(data),
                                         f"a ConsumeQueue file of {len(data)} bytes among files of {self.file_size}")
            self._cache.clear()
            got = self._cache[file_offset] = np.frombuffer(data, L.CQ_UNIT)
        return got

    def read_position(self, file_offset: int) -> int:
        """Where the file's readable part ends, after ``recover``'s ``truncateDirtyFiles``."""
        return max(0, min(self.file_size, self.max_offset - file_offset))

    def recover(self) -> None:
        """``ConsumeQueue.recover``: scan from the third file before the last for the first invalid entry."""
        if not self.offsets:
            return
        index = max(0, len(self.offsets) - 3)
        while True:
            base = self.offsets[index]
            u = self.units(base)
            bad = np.flatnonzero((u["phy_offset"] < 0) | (u["size"] <= 0))
            used = int(bad[0]) * UNIT if len(bad) else self.file_size
            if used:
                last = u[used // UNIT - 1]
                self.max_physic = int(last["phy_offset"]) + int(last["size"])
            if used == self.file_size and index + 1 < len(self.offsets):
                index += 1
                continue
            self.max_offset = base + used
            return

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """``ConsumeQueue.correctMinOffset(minCommitLogOffset)`` after a restart (minLogicOffset starts at 0)."""
        self.min_offset = 0
        if not self.offsets or self.min_offset >= self.max_offset:
            return
        last = self._last_file()
        read = self.read_position(last)
        if read >= UNIT and int(self.units(last)["phy_offset"][read // UNIT - 1]) < min_commitlog_offset:
            self.min_offset = last + read  # no valid entry: the minimum points past the last slot
            return
        first = self.offsets[0]
        start, intact = self.min_offset - first, True
        if start < 0:
            intact, start = False, 0
        read_first = self.read_position(first)
        if start > read_first:
            return
        size = read_first - start
        if size == 0:
            return
        phy = self.units(first)["phy_offset"][start // UNIT:read_first // UNIT].astype(np.int64)
        if intact and int(phy[0]) >= min_commitlog_offset:
            return
        low, high = 0, size - UNIT
        while high - low > UNIT:
            mid = (low + high) // 2 // UNIT * UNIT
            v = int(phy[mid // UNIT])
            if v > min_commitlog_offset:
                high = mid
            elif v == min_commitlog_offset:
                low = high = mid
                break
            else:
                low = mid
        for i in range(low, high + 1, UNIT):
            if int(phy[i // UNIT]) >= min_commitlog_offset:
                self.min_offset = first + start + i
                break

    def _last_file(self) -> int:
        """The last file ``recover`` keeps: ``truncateDirtyFiles`` deletes the files past the end, and keeps
        the one holding it (an empty one when the end falls on its first byte)."""
        return max(o for o in self.offsets if o <= self.max_offset)

    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """``ConsumeQueue.get``: the slot's (commitLogOffset, size, tagsCode), or None."""
        offset = queue_offset * UNIT
        if offset < self.min_offset or offset < 0 or offset >= self.max_offset:
            return None
        base = offset - offset % self.file_size
        if base not in self.offsets or offset - base >= self.read_position(base):
            return None
        u = self.units(base)[(offset - base) // UNIT]
        return int(u["phy_offset"]), int(u["size"]), int(u["tags_code"])


class ConsumeQueues:
    """Every queue under a ``consumequeue`` directory, loaded as a restarted broker loads them."""

    def __init__(self, directory: str, min_commitlog_offset: int):
        self.directory, self.min_commitlog_offset = directory, min_commitlog_offset
        self.queues: dict[tuple[str, int], Queue] = {}
        if not os.path.isdir(directory):
            raise StoreLayoutError(directory, "no such consumequeue directory")
        sizes = set()
        for topic in sorted(os.listdir(directory)):
            tdir = os.path.join(directory, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                qdir = os.path.join(tdir, qid)
                if not (os.path.isdir(qdir) and qid.lstrip("-").isdigit()):
                    continue
                names = sorted(n for n in os.listdir(qdir) if n.isdigit() and len(n) == L.CQ_NAME_DIGITS)
                for n in names:
                    sizes.add(os.stat(os.path.join(qdir, n)).st_size)
                self.queues[(topic, int(qid))] = Queue(topic, int(qid), qdir, [int(n) for n in names], 0)
        file_size = _most_common_size(self.queues) if len(sizes) > 1 else next(iter(sizes), 0)
        for q in self.queues.values():
            q.file_size = file_size
            q.recover()
            q.correct_min_offset(min_commitlog_offset)

    def get(self, topic: str, queue_id: int, queue_offset: int) -> tuple[int, int, int] | None:
        q = self.queues.get((topic, queue_id))
        return None if q is None else q.get(queue_offset)


def _most_common_size(queues: dict) -> int:
    from collections import Counter
    counts = Counter(os.stat(q.path(o)).st_size for q in queues.values() for o in q.offsets)
    return counts.most_common(1)[0][0]
