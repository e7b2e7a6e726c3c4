"""Dispatched records -> ConsumeQueue files: ``<dir>/<topic>/<queueId>/<20-digit fileFromOffset>``.

In: batches of :class:`rocketidx.commitlog.dispatch.Dispatched` in CommitLog order, and the queue file size
(``mappedFileSizeConsumeQueue`` rounded up to 20 bytes). Out: each queue's files, and a :class:`QueueInfo`
per queue for the manifest.

Stays true: every file is created at full size, zeros past what is written, as the broker preallocates
them, and holds exactly the bytes ``putMessagePositionInfo`` writes for the same records
(:mod:`rocketidx.consumequeue.placement` decides where each entry lands); a topic that is not one safe
directory name is a typed error naming its record, never a path outside the directory; files are
written with positional writes and synced by :meth:`ConsumeQueueWriter.close`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import rocketidx.layout as L
import rocketidx.storage as storage
from rocketidx.arrays import queue_order
from rocketidx.commitlog.dispatch import Dispatched
from rocketidx.commitlog.segments import Segment
from rocketidx.consumequeue.placement import UNIT, QueueState, append_run, place
from rocketidx.errors import TopicNameError

MAX_TOPIC_BYTES = 255  # a file name's limit here, and a topic's in RocketMQ (TopicValidator)


def file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: the file's first logical offset, 20 digits."""
    return f"{offset:0{L.CQ_NAME_DIGITS}d}"


def topic_problem(topic: str) -> str | None:
    """Why a topic cannot be one queue directory name (a single safe path component), or None."""
    raw = topic.encode("utf-8", "surrogatepass")
    return ("empty" if not topic else "'.' or '..'" if topic in (".", "..") else "holds '/'" if "/" in topic
            else "holds NUL" if "\x00" in topic else f"{len(raw)} bytes, over {MAX_TOPIC_BYTES}"
            if len(raw) > MAX_TOPIC_BYTES else None)


def check_topic(topic: str, seg: Segment, position: int) -> None:
    """A topic becomes a directory name: refuse one that is not a single safe path component."""
    why = topic_problem(topic)
    if why:
        raise TopicNameError(seg.path, position, topic, why)


@dataclass
class QueueInfo:
    """One queue as written: its files oldest first, where its entries start and end (slots), and counts."""

    topic: str
    queue_id: int
    files: list[str]
    min_offset: int  # minLogicOffset / 20: the first slot fillPreBlank left (0 unless the queue started late)
    max_offset: int  # written slots, blanks included (getMaxOffsetInQueue)
    entries: int  # entries appended (blanks not counted)

    def as_dict(self) -> dict:
        return {"topic": self.topic, "queue_id": self.queue_id, "files": self.files,
                "min_offset": self.min_offset, "max_offset": self.max_offset, "entries": self.entries}


# Units wait in memory and reach their files in large writes: a queue gets a few dozen units a batch, and a
# positional write (with its open and close) per queue and batch cost more than the units' bytes.
FLUSH_QUEUE_BYTES = 1 << 20  # a queue's waiting bytes, written once they reach this
FLUSH_ALL_BYTES = 64 << 20  # every queue's, written once the writer holds this many


class _Queue:
    def __init__(self, directory: str, file_size: int):
        self.directory = directory
        self.state = QueueState(file_size)
        self.created = 0  # end of the files created on disk
        self.waiting: list[memoryview] = []  # bytes from logical offset waiting_at on, not yet written
        self.waiting_at = 0
        self.waiting_bytes = 0
        # Called once before the first write to the queue's files: an incremental build's copy of the file the
        # queue appends to may still be on its way (rocketidx.build.incremental), and entries wait in memory.
        self.pending = None

    def ready(self) -> None:
        """Wait for what :attr:`pending` names (once)."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending()

    def _create_files(self) -> None:
        st, f = self.state, self.state.file_size
        if self.created == 0:
            os.makedirs(self.directory, exist_ok=True)
            self.created = st.first_file
        while self.created < st.files_end:
            fd = os.open(os.path.join(self.directory, file_name(self.created)), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                         0o644)
            try:
                os.ftruncate(fd, f)
            finally:
                os.close(fd)
            self.created += f

    def put(self, at: int, data: bytes | memoryview) -> int:
        """``data`` at logical offset ``at``: kept with the waiting bytes it continues, written when they are
        many (or first those, when it does not continue them). Returns how many bytes more are waiting."""
        before = self.waiting_bytes
        # A queue's writes follow its write position, so each continues the last; this keeps a write elsewhere
        # correct should a caller ever make one.
        if self.waiting and at != self.waiting_at + self.waiting_bytes:
            self.flush()
            before = 0
        if not self.waiting:
            self.waiting_at = at
        self.waiting.append(memoryview(data).cast("B"))
        self.waiting_bytes += len(self.waiting[-1])
        if self.waiting_bytes >= FLUSH_QUEUE_BYTES:
            self.flush()
        return self.waiting_bytes - before

    def flush(self) -> None:
        if self.waiting:
            data = self.waiting[0] if len(self.waiting) == 1 else b"".join(self.waiting)
            self.waiting, self.waiting_bytes = [], 0
            self.write(self.waiting_at, data)

    def write(self, at: int, data: bytes | memoryview) -> None:
        """``data`` at logical offset ``at``, across file boundaries."""
        self.ready()
        f = self.state.file_size
        data = memoryview(data)
        while len(data):
            base = at - at % f
            n = min(len(data), base + f - at)
            fd = os.open(os.path.join(self.directory, file_name(base)), os.O_WRONLY)
            try:
                written = os.pwrite(fd, data[:n], at - base)
            finally:
                os.close(fd)
            if written != n:
                raise OSError(f"{self.directory}/{file_name(base)}: short write ({written} of {n} bytes)")
            at, data = at + n, data[n:]


class ConsumeQueueWriter:
    """Writes every queue of a CommitLog under ``directory`` (``OUT/<version>/consumequeue``)."""

    def __init__(self, directory: str, file_size: int, resume=None):
        self.directory, self.file_size = directory, file_size
        self.queues: dict[tuple[str, int], _Queue] = {}
        # resume(topic, queue_id, queue): called with a queue the writer meets first, before its first entry: an
        # incremental build puts the queue's earlier state and files in place (rocketidx.build.incremental).
        self.resume = resume
        # What the rules dropped, and the records outside the contract: a negative QUEUEOFFSET would name a
        # file by a negative offset in the broker; it is skipped here and counted (docs/formats.md,
        # "ConsumeQueue entries").
        self.dropped = {"repeated": 0, "below_max_physic_offset": 0, "negative_queue_offset": 0}
        self.gaps = 0
        self.waiting = 0  # bytes the queues hold, not yet written

    def add(self, seg: Segment, d: Dispatched) -> None:
        """Place and write one batch's entries (CommitLog order within each queue).

        Each queue's records whose QUEUEOFFSETs continue its slots one by one, none 0, each ending past the one
        before (a clean log's every queue) are appended as one run, decided for all queues at once here; any
        other queue's records go through the broker's rules one by one (:func:`place`)."""
        for reason, count in d.left_out:
            self.dropped[reason] = self.dropped.get(reason, 0) + count
        if not len(d):
            return
        order, starts = queue_order(d.topic_index, d.queue_id)
        queues = []
        for g in range(len(starts) - 1):
            first = int(order[starts[g]])
            topic, qid = d.topics[int(d.topic_index[first])], int(d.queue_id[first])
            queue = self.queues.get((topic, qid))
            if queue is None:
                check_topic(topic, seg, int(d.position[first]))
                queue = self.queues[(topic, qid)] = _Queue(os.path.join(self.directory, topic, str(qid)),
                                                            self.file_size)
                if self.resume is not None:
                    self.resume(topic, qid, queue)
            queues.append(queue)
        runs = self._runs(d, order, starts, queues)
        units = np.empty(len(order), L.CQ_UNIT)
        units["phy_offset"], units["size"], units["tags_code"] = d.phy_offset[order], d.size[order], \
            d.tags_code[order]
        for g, queue in enumerate(queues):
            a, b = int(starts[g]), int(starts[g + 1])
            if runs[g]:
                append_run(queue.state, b - a, int(d.phy_offset[order[b - 1]] + d.size[order[b - 1]]))
                queue._create_files()
                self._put_units(queue, queue.state.write_pos - (b - a) * UNIT, units[a:b])
            else:
                self._put(queue, d, order[a:b])
        if self.waiting >= FLUSH_ALL_BYTES:
            self.flush()

    @staticmethod
    def _runs(d: Dispatched, order: np.ndarray, starts: np.ndarray, queues: list[_Queue]) -> np.ndarray:
        """Which queues' records are one run (see :meth:`add`), as :func:`place`'s own test decides it."""
        n = len(order)
        g = np.repeat(np.arange(len(queues)), np.diff(starts))
        slot = np.asarray([q.state.write_pos // UNIT for q in queues], np.int64)
        max_phy = np.asarray([q.state.max_phy for q in queues], np.int64)
        started = np.asarray([q.state.first_file is not None for q in queues], bool)
        q = d.queue_offset[order]
        end = d.phy_offset[order] + d.size[order]
        prev = np.empty(n, np.int64)
        prev[1:] = end[:-1]
        prev[starts[:-1]] = max_phy
        regular = (q == slot[g] + (np.arange(n) - starts[g])) & (q != 0) & (end > prev)
        return np.logical_and.reduceat(regular, starts[:-1]) & started

    def _put_units(self, queue: _Queue, at: int, units: np.ndarray) -> None:
        self.waiting += queue.put(at, units)

    def flush(self) -> None:
        """Write every queue's waiting bytes."""
        for q in self.queues.values():
            q.flush()
        self.waiting = 0

    def _put(self, queue: _Queue, d: Dispatched, idx: np.ndarray) -> None:
        negative = d.queue_offset[idx] < 0
        if negative.any():
            self.dropped["negative_queue_offset"] += int(negative.sum())
            idx = idx[~negative]
            if not len(idx):
                return
        placed = place(queue.state, d.queue_offset[idx], d.phy_offset[idx], d.size[idx])
        self.dropped["repeated"] += placed.dropped_repeated
        self.dropped["below_max_physic_offset"] += placed.dropped_below_max
        self.gaps += placed.gaps
        queue._create_files()
        if placed.blanks:
            blank = np.zeros(placed.blanks, L.CQ_UNIT)
            blank["phy_offset"], blank["size"], blank["tags_code"] = L.CQ_BLANK
            self._put_units(queue, placed.blank_from, blank)
        if len(placed.appended):
            rows = idx[placed.appended]
            units = np.empty(len(rows), L.CQ_UNIT)
            units["phy_offset"] = d.phy_offset[rows]
            units["size"] = d.size[rows]
            units["tags_code"] = d.tags_code[rows]
            self._put_units(queue, queue.state.write_pos - len(rows) * UNIT, units)

    def close(self, sync: bool = True) -> list[QueueInfo]:
        """Sync every file and directory (``sync=False``: a scratch rebuild, which no one keeps); the queues,
        sorted by topic and queue id."""
        self.flush()
        for q in self.queues.values():  # a file copied ahead is in place before it is synced, written to or not
            q.ready()
        infos, files, dirs = [], [], []
        for (topic, qid), q in sorted(self.queues.items()):
            st = q.state
            if st.first_file is None:  # every record of it had a negative QUEUEOFFSET: no file, no queue
                continue
            names = [file_name(o) for o in range(st.first_file, st.files_end, st.file_size)]
            files += [os.path.join(q.directory, n) for n in names]
            dirs.append(q.directory)
            infos.append(QueueInfo(topic, qid, names, st.min_offset // UNIT, st.slots, st.entries))
        if sync and infos:
            # Together, on threads: one file's sync at a time kept the close waiting on each in turn.
            storage.sync_files(files, dirs + sorted({os.path.join(self.directory, q.topic) for q in infos}))
            _fsync(self.directory)  # after its topics' directories: a topic is there once its queues are
        return infos


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
