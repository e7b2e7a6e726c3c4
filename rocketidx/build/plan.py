"""Where each time window's records are in a CommitLog, found by probing, not by reading it all.

In: local :class:`rocketidx.commitlog.segments.Segment` refs, the read's :class:`rocketidx.commitlog.splits.SplitSpec` and a
window length. Out: :func:`plan_windows` cuts ``[from_offset, to_offset)`` at record starts into
:class:`WindowRange` values, one per run of a window, and :func:`group_ranges` deals them into
:class:`DirectTask` values, each a few consecutive windows' bytes, so one task reads a window's records
and writes its IndexFiles without a shuffle.

Why probing works: a broker stamps ``storeTimestamp`` under its put lock, so a log is in time order
but for a clock that steps back or a replica's copied times. A boundary is then the first record at or
after a window's start time, and a bisection over byte positions finds it in a few dozen record reads
(each a resync on PHYSICALOFFSET, as a split does). Where the order is broken the bisection still
returns record starts and the ranges still tile the log; the records that sit in another window's
range (*strays*) are found by the tasks that read them and routed to their window's task in a second
pass (:mod:`rocketidx.build.direct_task`). Nothing here decides a result; it only decides who reads what.

Stays true: ranges are disjoint, in CommitLog order, start at a record start (or at the read's first
byte) and cover ``[lo, hi)`` of every segment read, so every byte is read by exactly one task and the
split infos tile the read as :func:`rocketidx.commitlog.splits.resolve_stops` expects.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from rocketidx.commitlog.records import find_first_record, release_pages, scan_records
from rocketidx.commitlog.segments import Segment, SegmentRange, open_segment
from rocketidx.commitlog.splits import SplitSpec
import rocketidx.layout as L

# Below this many bytes the bisection ends in a walk along the record chain.
WALK_BYTES = 64 * 1024
# A record is at most maxMessageSize (4 MiB): when none starts within this distance, none follows.
SEARCH_BYTES = 8 * 1024**2


class Probe(NamedTuple):
    pos: int  # segment offset of a record start
    ts: int  # its store timestamp


@dataclass(frozen=True)
class WindowRange:
    """Absolute bytes ``[start, end)`` of the log whose records (by the probes) belong to ``window``."""

    start: int
    end: int
    window: int


@dataclass(frozen=True)
class DirectTask:
    """One task of a direct build: the windows it writes and the pieces it reads, in CommitLog order.

    ``pieces`` tile this task's share of the log (their split infos count); ``extra`` are single records
    of its windows that lie in other tasks' pieces (strays, second pass only; their infos do not count).
    """

    index: int
    windows: tuple[int, ...]
    pieces: tuple[SegmentRange, ...]
    extra: tuple[SegmentRange, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(p.end - p.start for p in self.pieces)


class _Log:
    """The segments of one read, opened lazily, with the probes that bisection needs."""

    def __init__(self, segments: list[Segment], lo: int, hi: int):
        self.segments, self.lo, self.hi = segments, lo, hi
        self._bufs: dict[int, object] = {}
        self.probes = 0
        # Per segment, a position from which no record starts (a probe found none within SEARCH_BYTES): later
        # bisections stop there instead of probing the zero tail of the log's last segment again.
        self.no_record_from: dict[int, int] = {}

    def buf(self, i: int):
        if i not in self._bufs:
            self._bufs[i] = open_segment(self.segments[i])
        return self._bufs[i]

    def bounds(self, i: int) -> tuple[int, int]:
        """The segment-relative ``[lo, hi)`` this read covers in segment ``i``."""
        seg = self.segments[i]
        return max(0, self.lo - seg.base_offset), min(seg.size, self.hi - seg.base_offset)

    def record(self, i: int, pos: int) -> tuple[Probe, int] | None:
        """The valid record starting exactly at ``pos`` (structure only, no CRC) and its size, or None."""
        seg = self.segments[i]
        gen = scan_records(self.buf(i), seg, pos, pos + 1, check_crc=False, batch_records=1, judge_tail=False)
        for recs in gen:
            if len(recs):
                return Probe(pos, int(recs[0, L.REC_STORE_TS])), int(recs[0, L.REC_TOTAL])
        return None

    def probe(self, i: int, pos: int, limit: int) -> Probe | None:
        """The first record starting in ``[pos, limit)`` of segment ``i``, or None."""
        self.probes += 1
        seg = self.segments[i]
        end = min(limit, pos + SEARCH_BYTES)
        first = find_first_record(self.buf(i), seg, pos, end)
        found = self.record(i, first) if first is not None else None
        # A probe into a zero tail scans megabytes: keep them out of the driver's resident memory.
        release_pages(self.buf(i), pos, end + L.RECORD_PREFIX.itemsize)
        # None found up to where none can start (a record's length away, or a bound already known): none from pos.
        if first is None and (end == pos + SEARCH_BYTES or end >= self.no_record_from.get(i, self.bounds(i)[1])):
            self.no_record_from[i] = min(pos, self.no_record_from.get(i, pos))
        return found[0] if found else None

    def close(self) -> None:
        for buf in self._bufs.values():
            if hasattr(buf, "close"):
                try:
                    buf.close()
                except BufferError:  # a view of it outlives an interrupted probe: the map goes with the view
                    pass
        self._bufs.clear()

    def tail_before(self, i: int, lo: int, ts: int) -> bool:
        """Whether the records that start in the last :data:`WALK_BYTES` of segment ``i``'s read (after the
        record at ``lo``) all have store times before ``ts``; False when none is found there to say so."""
        seg_lo, seg_hi = self.bounds(i)
        hi = min(seg_hi, self.no_record_from.get(i, seg_hi))
        start = max(lo, hi - WALK_BYTES)
        first = self.probe(i, start, hi) if start > lo else Probe(lo, 0)
        if first is None:
            return False
        try:
            seen = False
            for recs in scan_records(self.buf(i), self.segments[i], first.pos, hi, check_crc=False,
                                     batch_records=4096, judge_tail=False):
                if len(recs) and (recs[:, L.REC_STORE_TS] >= ts).any():
                    return False
                seen |= len(recs) > 0
            return seen
        finally:
            release_pages(self.buf(i), first.pos, hi)

    def first_at_or_after(self, i: int, lo: int, ts: int) -> int | None:
        """Bisection in segment ``i``: the first record after the record at ``lo`` whose store time is at
        least ``ts`` (exact where the log is in time order), or None when no such record was found."""
        seg_lo, seg_hi = self.bounds(i)
        hi, answer = max(lo + 1, min(seg_hi, self.no_record_from.get(i, seg_hi))), None
        while hi - lo > WALK_BYTES:
            mid = (lo + hi) // 2
            p = self.probe(i, mid, hi)
            if p is None:
                hi = mid
            elif p.ts >= ts:
                hi, answer = mid, p.pos
            else:
                lo = p.pos
        # Walk the chain from lo (a record start) to hi, in one scan.
        try:
            for recs in scan_records(self.buf(i), self.segments[i], lo, hi, check_crc=False, batch_records=4096,
                                     judge_tail=False):
                later = (recs[:, L.REC_STORE_TS] >= ts) & (recs[:, L.REC_POS] > lo)
                if later.any():
                    return int(recs[int(later.argmax()), L.REC_POS])
            return answer
        finally:
            release_pages(self.buf(i), lo, hi)


def window_of(ts: int, window_ms: int) -> int:
    return ts // window_ms if window_ms else 0


def plan_windows(segments: list[Segment], spec: SplitSpec, window_ms: int, *,
                 within: SegmentRange | None = None) -> list[WindowRange]:
    """Cut the read into one :class:`WindowRange` per run of a window (see the module docstring).

    Local segments only. An empty list means no record starts in the read. ``within``: cut only this
    piece of one segment (it starts at a record), as a time index's slice plans it.
    """
    if not segments:
        return []
    lo = max(segments[0].base_offset, spec.from_offset or 0)
    hi = segments[-1].end_offset if spec.to_offset is None else min(segments[-1].end_offset, spec.to_offset)
    if within is not None:
        base = within.segment.base_offset
        lo, hi = max(lo, base + within.start), min(hi, base + within.end)
    log = _Log(segments, lo, hi)
    try:
        return _plan(log, segments, lo, hi, window_ms)
    finally:
        log.close()


def _plan(log: _Log, segments: list[Segment], lo: int, hi: int, window_ms: int) -> list[WindowRange]:
    # Each segment's first record: where a window that starts before the segment's first record ends.
    heads: list[Probe | None] = []
    for i in range(len(segments)):
        s_lo, s_hi = log.bounds(i)
        heads.append(log.probe(i, s_lo, s_hi) if s_lo < s_hi else None)
    start = next((i for i, h in enumerate(heads) if h is not None), None)
    if start is None:
        return []
    cuts: list[tuple[int, int]] = [(lo, window_of(heads[start].ts, window_ms))]
    if window_ms:
        i, at = start, heads[start].pos
        while True:
            target = (cuts[-1][1] + 1) * window_ms
            # The first later segment whose head is already past the target bounds the search.
            j = next((k for k in range(i + 1, len(segments)) if heads[k] is not None and heads[k].ts >= target), None)
            found = None
            for k in range(i, j if j is not None else len(segments)):
                if heads[k] is None:
                    continue
                from_pos = at if k == i else heads[k].pos
                if k != i and heads[k].ts >= target:
                    found = (k, heads[k].pos)
                    break
                # A window spans a few segments: where the next segment's head and the last records of k are all
                # still before the target, k is passed over without a bisection (in time order all of k is).
                later = next((heads[m] for m in range(k + 1, len(segments)) if heads[m] is not None), None)
                if later is not None and later.ts < target and log.tail_before(k, from_pos, target):
                    continue
                pos = log.first_at_or_after(k, from_pos, target)
                if pos is not None:
                    found = (k, pos)
                    break
            if found is None and j is not None:
                found = (j, heads[j].pos)
            if found is None:
                break
            i, at = found
            rec = log.record(i, at)
            cuts.append((segments[i].base_offset + at, window_of(rec[0].ts, window_ms)))
    ranges = []
    for (a, w), (b, _) in zip(cuts, cuts[1:] + [(hi, None)]):
        if b > a:
            ranges.append(WindowRange(a, b, w))
    return ranges


def group_ranges(segments: list[Segment], ranges: list[WindowRange], tasks: int) -> list[DirectTask]:
    """Deal consecutive ranges into ``tasks`` groups of about equal bytes (at most one per range), each
    group's bytes cut into pieces at segment boundaries; pieces are numbered in CommitLog order."""
    tasks = max(1, min(tasks, len(ranges)))
    sizes = np.array([r.end - r.start for r in ranges], np.float64)
    ends = np.cumsum(sizes)  # bytes up to the end of each range
    # Cut k (of tasks - 1) goes after the range whose end is nearest to k equal shares, keeping every
    # group non-empty: exactly ``tasks`` groups of consecutive ranges.
    cuts, prev = [], 0
    for k in range(1, tasks):
        i = int(np.abs(ends - ends[-1] * k / tasks).argmin()) + 1
        i = min(max(i, prev + 1), len(ranges) - (tasks - k))
        cuts.append(i)
        prev = i
    groups = [ranges[a:b] for a, b in zip([0] + cuts, cuts + [len(ranges)])]
    out: list[DirectTask] = []
    index = 0
    for g in (g for g in groups if g):
        pieces = []
        for r in g:
            for seg in segments:
                a, b = max(r.start, seg.base_offset), min(r.end, seg.end_offset)
                if a < b:
                    if pieces and pieces[-1].segment == seg and pieces[-1].end == a - seg.base_offset:
                        pieces[-1] = SegmentRange(seg, pieces[-1].start, b - seg.base_offset, pieces[-1].index)
                    else:
                        pieces.append(SegmentRange(seg, a - seg.base_offset, b - seg.base_offset, index))
                        index += 1
        out.append(DirectTask(len(out), tuple(sorted({r.window for r in g})), tuple(pieces)))
    return out


def slice_tasks(segments: list[Segment], ranges: list[WindowRange], tasks: int) -> list[DirectTask]:
    """Tasks for ranges that need not be contiguous nor in window order (a time index's slice): every
    range of a window goes to the one task owning it; windows are dealt, in order, into ``tasks`` groups
    of about equal bytes. Pieces are numbered in CommitLog order across all tasks."""
    by_window: dict[int, list[WindowRange]] = {}
    for r in ranges:
        by_window.setdefault(r.window, []).append(r)
    windows = sorted(by_window)
    if not windows:
        return []
    tasks = max(1, min(tasks, len(windows)))
    sizes = np.cumsum([sum(r.end - r.start for r in by_window[w]) for w in windows], dtype=np.float64)
    before = np.r_[0.0, sizes[:-1]]  # bytes of the windows before each: a window goes where it starts
    group_of = {w: min(tasks - 1, int(tasks * before[i] // max(1.0, sizes[-1]))) for i, w in enumerate(windows)}
    bases = [s.base_offset for s in segments]
    cut: list[tuple[int, int, int, int]] = []  # (absolute start, group, segment index, end)
    for r in ranges:
        i = bisect_right(bases, r.start) - 1
        cut.append((r.start, group_of[r.window], i, r.end))
    cut.sort()
    pieces: dict[int, list[SegmentRange]] = {}
    for n, (start, g, i, end) in enumerate(cut):
        seg = segments[i]
        pieces.setdefault(g, []).append(SegmentRange(seg, start - seg.base_offset, end - seg.base_offset, n))
    groups = sorted(pieces)
    return [DirectTask(k, tuple(w for w in windows if group_of[w] == g), tuple(pieces[g])) for k, g in enumerate(groups)]


def task_count(ranges: list[WindowRange], split_bytes: int, wanted: int | None, cores: int) -> int:
    """How many tasks: ``wanted`` when given, else enough for ``split_bytes`` each and at least one per
    core (never more than there are ranges)."""
    if wanted:
        return max(1, min(wanted, len(ranges)))
    total = sum(r.end - r.start for r in ranges)
    return max(1, min(len(ranges), max(cores, math.ceil(total / max(1, split_bytes)))))


def rerun_tasks(tasks: list[DirectTask], positions, windows, segments: list[Segment]) -> list[DirectTask]:
    """The second pass: every task owning a window that has strays, again, with those strays' records as
    ``extra`` pieces; windows no task owns (their records are all strays) go to one task of their own.

    ``positions``/``windows``: absolute record offsets of the stray entries and their windows.
    """
    bases = [s.base_offset for s in segments]
    extra: dict[int, list[SegmentRange]] = {}
    for pos, w in zip(map(int, positions), map(int, windows)):
        seg = segments[bisect_right(bases, pos) - 1]
        extra.setdefault(w, []).append(SegmentRange(seg, pos - seg.base_offset, pos - seg.base_offset + 1, -1))
    out: list[DirectTask] = []
    owned: set[int] = set()
    for t in tasks:
        owned.update(t.windows)
        mine = [r for w in t.windows for r in extra.get(w, [])]
        if mine:
            out.append(DirectTask(t.index, t.windows, t.pieces, tuple(mine)))
    orphans = sorted(set(extra) - owned)
    if orphans:
        out.append(DirectTask(len(tasks), tuple(orphans), (), tuple(r for w in orphans for r in extra[w])))
    return out
