"""Byte ranges of a CommitLog: planning them, and what their stops mean together.

In: :class:`rocketidx.commitlog.segments.Segment` refs (local or URI) and a :class:`SplitSpec` (split size, offset
and time bounds, CRC check, ranges to leave out). Out:

* :func:`plan_splits`: the :class:`SegmentRange` splits of a read, numbered in CommitLog order (the
  readers are in :mod:`rocketidx.commitlog.readers`);
* :class:`RangeInfo`: what one split's read saw;
* :func:`resolve_stops`: every split's :class:`RangeInfo` turned into the broker-recovery view (where
  reading ends for good, blank tails, counters) of the whole read.

Stays true: a split cannot know that an earlier split stopped for good, so :func:`resolve_stops` checks
that each split's first record is where the previous split's chain of TOTALSIZEs leads, and drops what
the broker's recovery would never read; nothing here needs a JVM: Spark's data source plans with
:func:`plan_splits` and reads with :func:`rocketidx.commitlog.readers.read_split`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Iterable

import numpy as np

from rocketidx.commitlog.records import STOP_CORRUPT, STOP_END_OF_DATA, STOP_RANGE_END
from rocketidx.commitlog.segments import Segment, SegmentRange
from rocketidx.config import DEFAULT_SPLIT_BYTES  # noqa: F401  (a Spark setting, and the planner's default)


DEFAULT_BATCH_RECORDS = 65536


@dataclass(frozen=True, kw_only=True)
class SplitSpec:
    """How a CommitLog read is cut into splits and what each split keeps.

    ``from_offset``/``to_offset``: absolute offsets, only records starting in ``[from, to)``;
    ``from_time_ms``/``to_time_ms``: only messages stored in ``[from, to)``; ``whole_segments``: base
    offsets of segments read as one split (no resync inside them); ``skip_offsets``: sorted absolute
    ``[start, end)`` intervals whose records are left out; ``skip_entries``: drop the first N entries of
    the message at ``from_offset`` (a backfill continues a file that already holds them).
    """

    split_bytes: int = DEFAULT_SPLIT_BYTES
    from_offset: int | None = None
    to_offset: int | None = None
    from_time_ms: int | None = None
    to_time_ms: int | None = None
    check_crc: bool = True
    batch_records: int = DEFAULT_BATCH_RECORDS
    whole_segments: tuple[int, ...] = ()
    skip_offsets: tuple[tuple[int, int], ...] = ()
    skip_entries: int = 0


def plan_splits(segments: list[Segment], spec: SplitSpec) -> list[SegmentRange]:
    """Cut the segments into splits of ``split_bytes``, clipped to ``[from_offset, to_offset)``; a segment
    in ``whole_segments`` is one split."""
    whole = set(spec.whole_segments)
    splits: list[SegmentRange] = []
    for seg in segments:
        lo = max(0, (spec.from_offset or 0) - seg.base_offset)
        hi = seg.size if spec.to_offset is None else min(seg.size, spec.to_offset - seg.base_offset)
        step = hi - lo if seg.base_offset in whole else spec.split_bytes
        for start in range(lo, hi, max(step, 1)):
            splits.append(SegmentRange(seg, start, min(hi, start + step), len(splits)))
    return splits


@dataclass(frozen=True)
class RangeInfo:
    """What one split's read saw: its first record, where it stopped and why, and its counters.

    ``first`` is the segment offset of the first record it found (None: no record starts in it);
    ``stop_*`` where its own reading ended (``range_end`` at the next record's start when the split's
    last record runs past its end and that record is valid). Counters cover the split's records,
    after the time filter; ``indexed``/``entries`` only when its entries were read.
    """

    index: int
    path: str
    base_offset: int
    size: int
    start: int
    end: int
    first: int | None
    stop_offset: int
    stop_kind: str
    stop_reason: str
    records: int = 0
    rollback: int = 0
    indexed: int = 0
    entries: int = 0
    phy_mismatch_at: int | None = None  # first record whose PHYSICALOFFSET is not its own offset
    worker_rss_kb: int = 0  # peak RSS of the process that read the split, when it finished
    cpu_ms: int = 0  # CPU time the process spent on this split
    reader: str = ""  # which reader read it: "kernel" (rocketidx._native) or "numpy"; "" not read

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> "RangeInfo":
        return cls(**json.loads(raw))

    @property
    def stop_dict(self) -> dict:
        return {"segment": self.path.rsplit("/", 1)[-1], "segment_offset": self.stop_offset,
                "phy_offset": self.base_offset + self.stop_offset, "kind": self.stop_kind,
                "reason": self.stop_reason}


@dataclass(frozen=True)
class ChainBreak:
    """A split whose first record is not where the previous split's chain of records leads."""

    path: str
    base_offset: int
    expected: int  # segment offset the chain leads to
    found: int | None  # what the split resynchronised on

    def __str__(self) -> str:
        return (f"{self.path} @ byte {self.expected}: the record chain continues here but the split "
                f"resynchronised at {self.found}")


@dataclass(frozen=True)
class ResolvedStops:
    """The broker-recovery view of all splits (what a sequential read from the first split would do).

    ``cut``: absolute offset of the first final stop (zero tail or invalid record), nothing at or after
    it counts; ``blanks``: ``(start, end)`` absolute intervals after a blank record, to the segment's
    end; ``stops``: each read segment's stop, as the core reader lists them; ``stop``: the last one.
    """

    cut: int | None
    blanks: tuple[tuple[int, int], ...]
    included: frozenset[int]
    stops: tuple[dict, ...]
    stop: dict | None
    bytes_read: int
    segments_read: int
    messages: int
    rollback: int
    indexed: int
    entries: int
    chain_breaks: tuple[ChainBreak, ...] = ()
    phy_mismatch: tuple[tuple[str, int], ...] = ()

    @property
    def skip_intervals(self) -> tuple[tuple[int, int], ...]:
        """Absolute ``[start, end)`` intervals whose records do not count (after the cut, after blanks)."""
        out = list(self.blanks)
        if self.cut is not None:
            out.append((self.cut, 2**63 - 1))
        return tuple(sorted(out))

    def whole_segments(self, already: tuple[int, ...] = ()) -> tuple[int, ...]:
        """``already`` plus the segments whose splits disagree: they are reread as one split."""
        return tuple(sorted(set(already) | {b.base_offset for b in self.chain_breaks}))


FINAL_STOPS = (STOP_END_OF_DATA, STOP_CORRUPT)  # reading ends for good


def resolve_stops(infos: Iterable[RangeInfo]) -> ResolvedStops:
    """Walk the splits in CommitLog order as the sequential reader would, following each chain.

    Within a segment the first split starts at a record (offset 0, or a resync at ``from_offset``);
    every later split must start where the previous one's chain leads, else a :class:`ChainBreak` is
    reported (the caller rereads that segment as one split). A blank stop ends the segment; a final
    stop ends reading for good. Only splits reached before those stops count.
    """
    by_segment: dict[int, list[RangeInfo]] = {}
    for info in {i.index: i for i in infos}.values():
        by_segment.setdefault(info.base_offset, []).append(info)
    cut = None
    blanks, stops, breaks, mismatch = [], [], [], []
    included: set[int] = set()
    bytes_read = messages = rollback = indexed = entries = segments_read = 0
    for base in sorted(by_segment):
        if cut is not None:
            break
        ranges = sorted(by_segment[base], key=lambda r: r.start)
        cont = None
        seg_stop: RangeInfo | None = None
        last = None
        for r in ranges:
            if seg_stop is not None:
                if r.first is not None and r.first < seg_stop.stop_offset:
                    breaks.append(ChainBreak(r.path, base, seg_stop.stop_offset, r.first))
                continue
            if cont is None:
                cont = r.first if r.first is not None else r.end
            if r.first is None:
                if cont < r.end:
                    breaks.append(ChainBreak(r.path, base, cont, None))
                last = r
                continue
            if r.first != cont:
                breaks.append(ChainBreak(r.path, base, cont, r.first))
            included.add(r.index)
            messages += r.records
            rollback += r.rollback
            indexed += r.indexed
            entries += r.entries
            if r.phy_mismatch_at is not None:
                mismatch.append((r.path, r.phy_mismatch_at))
            last = r
            if r.stop_kind == STOP_RANGE_END:
                cont = r.stop_offset
            else:
                seg_stop = r
        end = seg_stop or last
        if end is None:
            continue
        segments_read += 1
        stops.append(end.stop_dict)
        bytes_read += end.stop_offset
        if end.stop_kind == "blank":
            blanks.append((base + end.stop_offset, base + end.size))
        elif end.stop_kind in FINAL_STOPS:
            cut = base + end.stop_offset
    return ResolvedStops(cut, tuple(blanks), frozenset(included), tuple(stops), stops[-1] if stops else None,
                         bytes_read, segments_read, messages, rollback, indexed, entries, tuple(breaks),
                         tuple(mismatch))


def skip_mask(offsets, intervals: tuple[tuple[int, int], ...]):
    """True where an absolute offset falls in one of the sorted, disjoint ``[start, end)`` intervals."""
    if not intervals:
        return np.zeros(len(offsets), bool)
    lo = np.array([a for a, _ in intervals], np.int64)
    hi = np.array([b for _, b in intervals], np.int64)
    i = np.searchsorted(lo, offsets, side="right") - 1
    return (i >= 0) & (offsets < hi[np.maximum(i, 0)])
