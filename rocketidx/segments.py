"""CommitLog directory -> ordered segment refs, and the bytes of one segment.

In: a broker store directory (holding ``commitlog/``) or a CommitLog directory itself, as a local path or
any URI pyarrow.fs opens. Out: :class:`Segment` refs in offset order; :class:`SegmentRange` names bytes
``[start, end)`` of one of them; :func:`open_segment` maps a local segment read-only.
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
from pathlib import Path
from typing import Iterator, NamedTuple

from rocketidx.errors import StoreLayoutError
from rocketidx.paths import is_uri

SEGMENT_NAME = re.compile(r"^\d{20}$")


@dataclass(frozen=True)
class Segment:
    path: str  # local path, or URI
    base_offset: int
    size: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1] if is_uri(self.path) else os.path.basename(self.path)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size


@dataclass(frozen=True)
class SegmentRange:
    """Bytes ``[start, end)`` of a segment, in segment-relative offsets: read the records that START here.

    ``index`` orders the ranges of one plan (:func:`rocketidx.splits.plan_splits`) in CommitLog order.
    """

    segment: Segment
    start: int
    end: int
    index: int = 0


class _Entry(NamedTuple):
    name: str
    path: str  # as the caller will open it: a local path, or a URI
    size: int
    is_dir: bool


def _local_entries(path: str) -> tuple[str, Iterator[_Entry]]:
    p = Path(path)
    if not p.exists():
        raise StoreLayoutError(str(p), "no such directory")
    if not p.is_dir():
        raise StoreLayoutError(str(p), "not a directory")
    if (p / "commitlog").is_dir():
        p = p / "commitlog"
    return str(p), (_Entry(e.name, e.path, 0 if e.is_dir() else e.stat().st_size, e.is_dir())
                    for e in os.scandir(p))


def _uri_entries(uri: str) -> tuple[str, Iterator[_Entry]]:
    import pyarrow.fs as pafs
    fs, root = pafs.FileSystem.from_uri(uri)
    # The URI up to its path: entries come back as filesystem paths and are named by URI again.
    prefix = uri[: len(uri) - len(root)] if uri.endswith(root) else uri.split("://", 1)[0] + "://"
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise StoreLayoutError(uri, "no such directory")
    if info.type != pafs.FileType.Directory:
        raise StoreLayoutError(uri, "not a directory")
    sub = root.rstrip("/") + "/commitlog"
    if fs.get_file_info(sub).type == pafs.FileType.Directory:
        root = sub
    entries = fs.get_file_info(pafs.FileSelector(root))
    return prefix + root, (_Entry(e.base_name, e.path if e.path.startswith(prefix) else prefix + e.path,
                                  0 if e.size is None else int(e.size), e.type == pafs.FileType.Directory)
                           for e in entries)


def list_segments(path: str | os.PathLike, *, from_offset: int | None = None,
                  to_offset: int | None = None) -> list[Segment]:
    """The CommitLog's segments in offset order, checked for names, equal sizes and gaps.

    ``path`` is local, or a URI (the segments' ``path`` then keeps the URI). ``from_offset``/``to_offset``
    keep only the segments overlapping that absolute offset range.
    """
    where, entries = _uri_entries(path) if is_uri(path) else _local_entries(str(path))
    segments: list[Segment] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.is_dir:
            continue
        if not SEGMENT_NAME.match(entry.name):
            raise StoreLayoutError(entry.path, "not a CommitLog segment (name must be a 20-digit "
                                               "base offset); move it out of the CommitLog directory")
        segments.append(Segment(entry.path, int(entry.name), entry.size))
    if not segments:
        raise StoreLayoutError(where, "no CommitLog segments found")
    # The segment size is the step between names (what the broker allocates each file), so a truncated
    # or overgrown segment is the one blamed, not its neighbour (when all agree, a missing one is a gap).
    sizes = {seg.size for seg in segments}
    steps = Counter(b.base_offset - a.base_offset for a, b in zip(segments, segments[1:]))
    size = sizes.pop() if len(sizes) == 1 else steps.most_common(1)[0][0]
    for seg in segments:
        if seg.size != size:
            raise StoreLayoutError(seg.path, f"segment size {seg.size} differs from the {size} between segment "
                                             "names; every segment has the same size (truncated or copied in part?)")
    for prev, seg in zip(segments, segments[1:]):
        if seg.base_offset != prev.end_offset:
            raise StoreLayoutError(seg.path, f"gap in segment offsets: previous segment ends at "
                                             f"{prev.end_offset}, this one starts at {seg.base_offset}")
    if size == 0:
        raise StoreLayoutError(segments[0].path, "empty segment")
    if from_offset is not None:
        segments = [s for s in segments if s.end_offset > from_offset]
    if to_offset is not None:
        segments = [s for s in segments if s.base_offset < to_offset]
    return segments


def open_segment(seg: Segment):
    """A local segment's bytes as a read-only mmap (an empty file gives empty bytes)."""
    import mmap
    with open(seg.path, "rb") as f:
        if seg.size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
