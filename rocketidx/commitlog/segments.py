"""CommitLog directory -> ordered segment refs, and the bytes of one segment.

In: a broker store directory (holding ``commitlog/``) or a CommitLog directory itself, as a local path or
any URI pyarrow.fs opens. Out: :class:`Segment` refs in offset order; :class:`SegmentRange` names bytes
``[start, end)`` of one of them; :func:`open_segment` maps a segment read-only.
Stays true: segments are named by their 20-digit base offset, all have one size, and each starts where
the previous one ends; anything else is a :class:`StoreLayoutError` naming the file, because reading
past a gap or a short segment would index offsets the broker can never serve. Local and remote
directories are listed by one rule; only how the entries are read differs.
"""
from __future__ import annotations

import os
from collections import Counter
import re
from dataclasses import dataclass

from rocketidx.errors import StoreLayoutError
import rocketidx.storage as storage

SEGMENT_NAME = re.compile(r"^\d{20}$")


@dataclass(frozen=True)
class Segment:
    path: str  # local path, or URI
    base_offset: int
    size: int

    @property
    def name(self) -> str:
        return storage.basename(self.path)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size


@dataclass(frozen=True)
class SegmentRange:
    """Bytes ``[start, end)`` of a segment, in segment-relative offsets: read the records that START here.

    ``index`` orders the ranges of one plan (:func:`rocketidx.commitlog.splits.plan_splits`) in CommitLog order.
    """

    segment: Segment
    start: int
    end: int
    index: int = 0


def _entries(path: str) -> tuple[str, list[storage.Entry]]:
    """The CommitLog directory under ``path`` (itself, or a store's ``commitlog/``) and its entries."""
    found = storage.stat(path)
    if found is None:
        raise StoreLayoutError(storage.redact(path), "no such directory")
    if found.kind != storage.DIR:
        raise StoreLayoutError(storage.redact(path), "not a directory")
    sub = storage.stat(storage.join(path, "commitlog"))
    if sub is not None and sub.kind == storage.DIR:
        path = sub.path
    return path, storage.listdir(path)


def commitlog_dir(path: str | os.PathLike) -> str:
    """The CommitLog directory ``path`` names (itself, or a store's ``commitlog/``), as a manifest records
    it (a URI redacted)."""
    return storage.redact(_entries(storage.normalize(path))[0])


def list_segments(path: str | os.PathLike, *, from_offset: int | None = None,
                  to_offset: int | None = None) -> list[Segment]:
    """The CommitLog's segments in offset order, checked for names, equal sizes and gaps.

    ``path`` is local, or a URI (the segments' ``path`` then keeps the URI). ``from_offset``/``to_offset``
    keep only the segments overlapping that absolute offset range.
    """
    where, entries = _entries(storage.normalize(path))
    segments: list[Segment] = []
    for entry in entries:
        if entry.kind == storage.DIR:
            continue
        if not SEGMENT_NAME.match(entry.name):
            raise StoreLayoutError(storage.redact(entry.path), "not a CommitLog segment (name must be a 20-digit "
                                               "base offset); move it out of the CommitLog directory")
        segments.append(Segment(entry.path, int(entry.name), entry.size))
    if not segments:
        raise StoreLayoutError(storage.redact(where), "no CommitLog segments found")
    # The segment size is the step between names (what the broker allocates each file), so a truncated
    # or overgrown segment is the one blamed, not its neighbour (when all agree, a missing one is a gap).
    sizes = {seg.size for seg in segments}
    steps = Counter(b.base_offset - a.base_offset for a, b in zip(segments, segments[1:]))
    size = sizes.pop() if len(sizes) == 1 else steps.most_common(1)[0][0]
    for seg in segments:
        if seg.size != size:
            raise StoreLayoutError(storage.redact(seg.path), f"segment size {seg.size} differs from the {size} between segment "
                                             "names; every segment has the same size (truncated or copied in part?)")
    for prev, seg in zip(segments, segments[1:]):
        if seg.base_offset != prev.end_offset:
            raise StoreLayoutError(storage.redact(seg.path), f"gap in segment offsets: previous segment ends at "
                                             f"{prev.end_offset}, this one starts at {seg.base_offset}")
    if size == 0:
        raise StoreLayoutError(storage.redact(segments[0].path), "empty segment")
    if from_offset is not None:
        segments = [s for s in segments if s.end_offset > from_offset]
    if to_offset is not None:
        segments = [s for s in segments if s.base_offset < to_offset]
    return segments


def open_segment(seg: Segment):
    """A segment's bytes as a read-only mapping (an empty file gives empty bytes); a remote segment is
    copied to local scratch space first (:func:`rocketidx.storage.map_range`)."""
    return storage.map_range(seg.path, seg.size)
