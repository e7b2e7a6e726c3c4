"""CommitLog directory -> ordered segment refs, and byte-range splits of them.

In: a broker store directory (holding ``commitlog/``) or a CommitLog directory itself.
Out: :class:`Segment` refs in offset order, and :class:`SegmentRange` splits of ``split_bytes``.
Stays true: segments are named by their 20-digit base offset, all have one size, and each starts where
the previous one ends; anything else is a :class:`StoreLayoutError` naming the file, because reading
past a gap or a short segment would index offsets the broker can never serve.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rocketidx.errors import StoreLayoutError

SEGMENT_NAME = re.compile(r"^\d{20}$")


@dataclass(frozen=True)
class Segment:
    path: str
    base_offset: int
    size: int

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size


@dataclass(frozen=True)
class SegmentRange:
    """Bytes ``[start, end)`` of a segment, in segment-relative offsets: read the records that START here."""

    segment: Segment
    start: int
    end: int


def resolve_commitlog_dir(path: str | os.PathLike) -> Path:
    """Accept a store directory (with ``commitlog/``) or the CommitLog directory itself."""
    p = Path(path)
    if not p.exists():
        raise StoreLayoutError(str(p), "no such directory")
    if not p.is_dir():
        raise StoreLayoutError(str(p), "not a directory")
    if (p / "commitlog").is_dir():
        return p / "commitlog"
    return p


def list_segments(path: str | os.PathLike, *, from_offset: int | None = None,
                  to_offset: int | None = None) -> list[Segment]:
    """The CommitLog's segments in offset order, checked for names, equal sizes and gaps.

    ``from_offset``/``to_offset`` keep only the segments overlapping that absolute offset range.
    """
    d = resolve_commitlog_dir(path)
    segments: list[Segment] = []
    for entry in sorted(os.scandir(d), key=lambda e: e.name):
        if entry.is_dir():
            continue
        if not SEGMENT_NAME.match(entry.name):
            raise StoreLayoutError(entry.path, "not a CommitLog segment (name must be a 20-digit "
                                               "base offset); move it out of the CommitLog directory")
        segments.append(Segment(entry.path, int(entry.name), entry.stat().st_size))
    if not segments:
        raise StoreLayoutError(str(d), "no CommitLog segments found")
    size = segments[0].size
    for prev, seg in zip(segments, segments[1:]):
        if prev.size != size:
            raise StoreLayoutError(prev.path, f"segment size {prev.size} differs from the first "
                                              f"segment's {size}; every segment has the same size")
        if seg.base_offset != prev.end_offset:
            raise StoreLayoutError(seg.path, f"gap in segment offsets: previous segment ends at "
                                             f"{prev.end_offset}, this one starts at {seg.base_offset}")
    last = segments[-1]
    if last.size != size:
        raise StoreLayoutError(last.path, f"segment size {last.size} differs from the first "
                                          f"segment's {size}; every segment has the same size")
    if size == 0:
        raise StoreLayoutError(segments[0].path, "empty segment")
    if from_offset is not None:
        segments = [s for s in segments if s.end_offset > from_offset]
    if to_offset is not None:
        segments = [s for s in segments if s.base_offset < to_offset]
    return segments


def plan_ranges(segments: list[Segment], split_bytes: int) -> list[SegmentRange]:
    """Cut every segment into byte ranges of at most ``split_bytes`` (the last one shorter)."""
    if split_bytes <= 0:
        raise ValueError("split_bytes must be positive")
    ranges = []
    for seg in segments:
        for start in range(0, seg.size, split_bytes):
            ranges.append(SegmentRange(seg, start, min(seg.size, start + split_bytes)))
    return ranges
