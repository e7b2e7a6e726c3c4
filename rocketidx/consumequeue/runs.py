"""ConsumeQueues built split by split: each split's entries as runs, the runs placed in order, the files assembled.

What the Spark build does (:mod:`rocketidx.build.queues` drives it), in three steps that need no Spark:

1. :class:`SplitQueues`, in the task that reads a split: the split's dispatched records, queue by queue,
   cut into runs (:func:`rocketidx.consumequeue.placement.find_runs`); every record's 20-byte unit goes
   into the task's *piece* file, a run's units one after the other; out come a few numbers per run
   (:data:`RUN_ROWS`), never an entry.
2. :func:`settle`, on the driver: every counted split's runs, per queue in CommitLog order, through
   :func:`rocketidx.consumequeue.placement.place_runs`: where each run's units land (slots), the queues'
   files, counters and blank fills, as :class:`FilePlan` rows (which piece bytes go where in which file).
3. :func:`write_file`, in any task: one queue file from its plan (blank fill, piece copies).

Stays true: the files are byte for byte those :class:`rocketidx.consumequeue.writer.ConsumeQueueWriter`
writes from the same records read in one pass (the placement tests hold ``place_runs`` to ``place``); a
task holds one split's units at most, the driver a few numbers per run, an assembly task one copy at a
time: no step holds a whole queue, however hot.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
# pyarrow.compute is imported by the functions that use it: its import takes 40 ms, which a command that never
# calls them (an incremental index build, a query) does not pay.

import rocketidx.layout as L
from rocketidx.arrays import numpy_of, queue_order, table_of
from rocketidx.commitlog.dispatch import Dispatched
from rocketidx.commitlog.segments import Segment
from rocketidx.consumequeue.placement import CONSECUTIVE, UNIT, ZERO, QueueState, find_runs, place_runs
from rocketidx.consumequeue.writer import QueueInfo, file_name, topic_problem
from rocketidx.errors import TopicNameError
import rocketidx.storage as storage

RUN_ROWS = pa.schema([
    ("split", pa.int32()),  # the split's index (CommitLog order)
    ("order", pa.int32()),  # the run's place among its queue's runs in the split
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("kind", pa.int8()),  # placement.CONSECUTIVE or ZERO
    ("q0", pa.int64()),  # the first record's QUEUEOFFSET
    ("n", pa.int64()),
    ("first_end", pa.int64()),  # phy + size of the first record, and of the last
    ("last_end", pa.int64()),
    ("piece", pa.string()),  # the piece file (relative to the staging directory) and where the run's units start
    ("piece_at", pa.int64()),
])


@dataclass
class BadTopic:
    """The first record of a split whose topic cannot be a directory name (raised only if the split counts)."""

    path: str
    position: int
    topic: str
    why: str

    def error(self) -> TopicNameError:
        return TopicNameError(self.path, self.position, self.topic, self.why)


class SplitQueues:
    """One split's records, gathered per queue until the split is read (memory: the split's units)."""

    def __init__(self, split: int):
        self.split = split
        self.parts: dict[tuple[str, int], list[np.ndarray]] = {}
        self.negative = 0  # QUEUEOFFSET < 0: no entry, counted (docs/formats.md, where an entry lands)
        self.bad_topic: BadTopic | None = None
        self.left_out: dict[str, int] = {}  # light-queue units the rules left out, by reason

    def add(self, seg: Segment, d: Dispatched) -> None:
        for reason, count in d.left_out:
            self.left_out[reason] = self.left_out.get(reason, 0) + count
        if not len(d):
            return
        keep = d.queue_offset >= 0
        self.negative += int(len(keep) - np.count_nonzero(keep))
        for t, topic in enumerate(d.topics):
            why = topic_problem(topic)
            if why is None:
                continue
            rows = np.flatnonzero(d.topic_index == t)
            if len(rows) and (self.bad_topic is None or int(d.position[rows[0]]) < self.bad_topic.position):
                self.bad_topic = BadTopic(seg.path, int(d.position[rows[0]]), topic, why)
            keep &= d.topic_index != t
        idx = np.flatnonzero(keep)
        if not len(idx):
            return
        # Every kept record in queue order (CommitLog order within a queue), gathered once; each queue keeps a
        # slice of it.
        order, starts = queue_order(d.topic_index[idx], d.queue_id[idx])
        rows = idx[order]
        parts = np.empty(len(rows), _PART)
        parts["q"], parts["phy_offset"] = d.queue_offset[rows], d.phy_offset[rows]
        parts["size"], parts["tags_code"] = d.size[rows], d.tags_code[rows]
        for a, b in zip(starts[:-1].tolist(), starts[1:].tolist()):
            first = int(rows[a])
            k = (d.topics[int(d.topic_index[first])], int(d.queue_id[first]))
            self.parts.setdefault(k, []).append(parts[a:b])

    def finish(self, piece_path: str, piece_name: str, in_place: InPlace | None = None) -> pa.Table:
        """Write the units to ``piece_path`` (nothing when no queue has a record) and return the runs; with
        ``in_place``, each consecutive run's units also where a clean log puts them (:class:`InPlace`)."""
        cols: dict[str, list] = {f.name: [] for f in RUN_ROWS}
        if not self.parts:
            return table_of(cols, RUN_ROWS)
        at = 0
        with open(piece_path, "wb") as out, _Files() as files:
            for (topic, qid), parts in sorted(self.parts.items()):
                recs = np.concatenate(parts)
                end = recs["phy_offset"] + recs["size"]
                starts = find_runs(recs["q"], end)
                stops = np.append(starts[1:], len(recs))
                units = np.empty(len(recs), L.CQ_UNIT)
                for name in ("phy_offset", "size", "tags_code"):
                    units[name] = recs[name]
                out.write(units.view(np.uint8))  # the array itself, not a copy of it
                if in_place is not None:
                    for a, b in zip(starts.tolist(), stops.tolist()):
                        if recs["q"][a] != 0:  # CONSECUTIVE: its own QUEUEOFFSETs are its slots on a clean log
                            in_place.write(files, topic, qid, int(recs["q"][a]), units[a:b])
                r = len(starts)
                cols["split"] += [self.split] * r
                cols["order"] += list(range(r))
                cols["topic"] += [topic] * r
                cols["queue_id"] += [qid] * r
                cols["kind"] += np.where(recs["q"][starts] == 0, ZERO, CONSECUTIVE).tolist()
                cols["q0"] += recs["q"][starts].tolist()
                cols["n"] += (stops - starts).tolist()
                cols["first_end"] += end[starts].tolist()
                cols["last_end"] += end[stops - 1].tolist()
                cols["piece"] += [piece_name] * r
                cols["piece_at"] += (at + starts * UNIT).tolist()
                at += len(recs) * UNIT
            # Not synced: a piece lives until the queue files are written from it, and those are synced; a crash
            # before the commit discards the whole staging version with it.
        self.parts.clear()
        return table_of(cols, RUN_ROWS)


@dataclass(frozen=True)
class InPlace:
    """Where a read task also writes each consecutive run's units: the queue files under ``directory`` (local),
    at the slots the run's QUEUEOFFSETs name. On a clean log that is where :func:`settle` places them, so the
    files need no copy from the pieces afterwards; :func:`settle` keeps only what it proves (a queue whose every
    consecutive run landed on its own offsets), and a queue it cannot is written anew from the pieces."""

    directory: str
    file_size: int

    def write(self, files: "_Files", topic: str, qid: int, q0: int, units: np.ndarray) -> None:
        data, at = memoryview(np.ascontiguousarray(units).view(np.uint8)), q0 * UNIT  # no copy of the run
        while len(data):  # across file boundaries
            base = at - at % self.file_size
            n = min(len(data), base + self.file_size - at)
            path = os.path.join(self.directory, topic, str(qid), file_name(base))
            _pwrite_all(files.open(path, self.file_size), data[:n], at - base, path)
            data, at = data[n:], at + n


class _Files:
    """Queue files a task writes into, opened once each; each created at full size (as :func:`write_file`
    makes it, so tasks that share a file agree on it: a size already reached is left alone)."""

    def __init__(self) -> None:
        self.fds: dict[str, int] = {}

    def open(self, path: str, size: int) -> int:
        fd = self.fds.get(path)
        if fd is None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = self.fds[path] = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
        return fd

    def __enter__(self) -> "_Files":
        return self

    def __exit__(self, *exc) -> None:
        for fd in self.fds.values():
            storage.start_writeback(fd)
            os.close(fd)
        self.fds.clear()


_PART = np.dtype([("q", np.int64), ("phy_offset", np.int64), ("size", np.int32), ("tags_code", np.int64)])


# --- the driver: runs -> where every unit goes ----------------------------------------------------------

@dataclass
class FilePlan:
    """One queue file: its path under the ``consumequeue`` directory, the blank slots to fill (byte offset
    in the file, count) and the piece bytes to copy (``piece``, ``piece_at``, ``length``, ``at`` in the file)."""

    path: str
    blank_at: int = 0
    blanks: int = 0
    copies: list[tuple[str, int, int, int]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(c[2] for c in self.copies) + self.blanks * UNIT


@dataclass
class Settled:
    """:func:`settle`'s answer: the queues (manifest rows), every file's plan, and the rules' counters."""

    queues: list[QueueInfo]
    files: list[FilePlan]
    dropped_repeated: int = 0
    dropped_below_max: int = 0
    gaps: int = 0
    in_place: set[tuple[str, int]] = field(default_factory=set)  # queues whose consecutive units are in place


def settle(runs: pa.Table, file_size: int, read_ends, in_place: bool = False,
           dirty: frozenset[tuple[str, int]] = frozenset()) -> Settled:
    """Place every run (``runs``: the counted splits' :data:`RUN_ROWS`) queue by queue, in CommitLog order.

    ``read_ends(piece, piece_at, n)``: the entry ends of ``n`` units in a piece (asked for only where the
    broker's ``maxPhysicOffset`` rule may drop some: a replayed or rewritten log). ``in_place``: the reads
    wrote their consecutive runs in place too (:class:`InPlace`); a queue (not among ``dirty``, those a read
    that does not count wrote into) whose every consecutive run is placed whole on its own offsets needs only
    its other runs copied (its plans say so), and the others are written anew.
    """
    out = Settled([], [])
    if not runs.num_rows:
        return out
    # Queue by queue, each queue's runs in CommitLog order: sorted here in numpy (a Table's sort_by would import
    # pyarrow.compute, 40 ms of the driver's serial time). Python's str order is UTF-8's byte order.
    topics = runs.column("topic").to_pylist()
    names = sorted(set(topics))
    rank = {t: i for i, t in enumerate(names)}
    topic_rank = np.fromiter((rank[t] for t in topics), np.int64, len(topics))
    raw = {name: numpy_of(runs.column(name)) for name in ("split", "order", "queue_id", "kind", "q0", "n",
                                                           "first_end", "last_end", "piece_at")}
    order = np.lexsort((raw["order"], raw["split"], raw["queue_id"], topic_rank))
    c = {name: col[order] for name, col in raw.items()}
    topics = [topics[i] for i in order.tolist()]
    all_pieces = runs.column("piece").to_pylist()
    pieces = [all_pieces[i] for i in order.tolist()]
    qid = c["queue_id"]
    ranks = topic_rank[order]
    new = np.ones(len(qid), bool)
    new[1:] = (qid[1:] != qid[:-1]) | (ranks[1:] != ranks[:-1])
    bounds = np.append(np.flatnonzero(new), len(qid))
    for a, b in zip(bounds[:-1], bounds[1:]):
        topic, queue = topics[a], int(qid[a])
        state = QueueState(file_size)
        sl = slice(a, b)
        placed = place_runs(state, c["kind"][sl], c["q0"][sl], c["n"][sl], c["first_end"][sl], c["last_end"][sl],
                            lambda r: read_ends(pieces[a + r], int(c["piece_at"][a + r]), int(c["n"][a + r])))
        out.dropped_repeated += placed.dropped_repeated
        out.dropped_below_max += placed.dropped_below_max
        out.gaps += placed.gaps
        if state.first_file is None:  # every record was dropped before any file: no queue (as in process)
            continue
        consecutive = c["kind"][sl] == CONSECUTIVE
        landed = in_place and (topic, queue) not in dirty and bool(
            ((placed.skip == 0) & (placed.count == c["n"][sl]) & (placed.slot == c["q0"][sl]))[consecutive].all())
        if landed:
            out.in_place.add((topic, queue))
        directory = f"{topic}/{queue}"
        plans = {o: FilePlan(f"{directory}/{file_name(o)}") for o in range(state.first_file, state.files_end,
                                                                               file_size)}
        if placed.blanks:
            p = plans[placed.blank_from - placed.blank_from % file_size]
            p.blank_at, p.blanks = placed.blank_from % file_size, placed.blanks
        for r in np.flatnonzero((placed.count > 0) & ~(consecutive & landed)):
            src = int(c["piece_at"][a + r]) + int(placed.skip[r]) * UNIT
            at, left = int(placed.slot[r]) * UNIT, int(placed.count[r]) * UNIT
            while left:  # across file boundaries
                base = at - at % file_size
                length = min(left, base + file_size - at)
                plans[base].copies.append((pieces[a + r], src, length, at - base))
                src, at, left = src + length, at + length, left - length
        out.files += plans.values()
        out.queues.append(QueueInfo(topic, queue, [file_name(o) for o in plans], state.min_offset // UNIT,
                                    state.slots, state.entries))
    return out


def read_piece_ends(root: str):
    """A ``read_ends`` for :func:`settle` over piece files under ``root`` (the staging directory: a path or
    a URI)."""
    def read(piece: str, at: int, n: int) -> np.ndarray:
        with storage.RangeFile(storage.join(root, piece)) as f:
            units = np.frombuffer(f.read_at(n * UNIT, at), L.CQ_UNIT)
        return units["phy_offset"].astype(np.int64) + units["size"].astype(np.int64)
    return read


COPY_BYTES = 8 * 1024**2  # what an assembly task holds at a time


def write_file(directory: str, pieces_root: str, plan: FilePlan, file_size: int, sync: bool = True) -> None:
    """Write one queue file under ``directory`` (local) from its plan: created at full size (zeros, as the
    broker preallocates), blank slots filled, the pieces' units (under ``pieces_root``: a path or a URI)
    copied, synced. Writing it again gives the same bytes, so a retried or speculative task is harmless."""
    path = os.path.join(directory, plan.path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, file_size)
        if plan.blanks:
            blank = np.zeros(plan.blanks, L.CQ_UNIT)
            blank["phy_offset"], blank["size"], blank["tags_code"] = L.CQ_BLANK
            _pwrite_all(fd, blank.tobytes(), plan.blank_at, path)
        if storage.is_uri(pieces_root) or not _copy_in_kernel(fd, pieces_root, plan.copies):
            _copy_through(fd, pieces_root, plan.copies, path)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _copy_through(fd: int, root: str, copies: list, path: str) -> None:
    """The copies of pieces (under ``root``: a path or a URI) into ``fd``, read and written here."""
    opened: dict[str, storage.RangeFile] = {}
    try:
        for piece, src, length, at in copies:
            f = opened.get(piece)
            if f is None:
                f = opened[piece] = storage.RangeFile(storage.join(root, piece))
            done = 0
            while done < length:
                data = f.read_at(min(COPY_BYTES, length - done), src + done)
                if not data:
                    raise OSError(f"{storage.redact(f.path)}: ends before byte {src + done}")
                _pwrite_all(fd, data, at + done, path)
                done += len(data)
    finally:
        for f in opened.values():
            f.close()


def _copy_in_kernel(fd: int, root: str, copies: list) -> bool:
    """The copies of local pieces into ``fd`` by ``copy_file_range`` (no bytes through this process); False, having
    copied nothing, where the system has no such call for these files (then they are read and written)."""
    if not copies or not hasattr(os, "copy_file_range"):
        return not copies
    opened: dict[str, int] = {}
    try:
        for k, (piece, src, length, at) in enumerate(copies):
            if piece not in opened:
                opened[piece] = os.open(os.path.join(root, piece), os.O_RDONLY)
            done = 0
            while done < length:
                try:
                    n = os.copy_file_range(opened[piece], fd, length - done, src + done, at + done)
                except OSError as e:
                    if k == 0 and done == 0 and e.errno in (errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP):
                        return False
                    raise
                if n <= 0:
                    raise OSError(f"{os.path.join(root, piece)}: ends before byte {src + done}")
                done += n
        return True
    finally:
        for f in opened.values():
            os.close(f)


def _pwrite_all(fd: int, data: bytes, at: int, path: str) -> None:
    view = memoryview(data)
    while len(view):
        n = os.pwrite(fd, view, at)
        if n <= 0:
            raise OSError(f"{path}: short write at byte {at}")
        view, at = view[n:], at + n
