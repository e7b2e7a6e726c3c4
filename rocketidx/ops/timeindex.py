"""The time index: :func:`timeindex` takes a :class:`rocketidx.config.TimeIndexRequest` and returns a
:class:`TimeIndexResult`: it writes a CommitLog's sparse time index, or checks one against a fresh scan.

In: a local CommitLog (or store) directory and the index directory (a build output's ``_timeindex``, never
a broker's ``store/index``). Out: one ``<segment>.tix`` per segment read, or per segment whether its file is
ok, missing or stale. Stays true: a check changes nothing, and judges each segment at its own block size.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from rocketidx.commitlog.segments import list_segments
from rocketidx.commitlog.timeindex import DEFAULT_BLOCK_BYTES, load, save, scan_segments
from rocketidx.config import TimeIndexRequest
from rocketidx.errors import StoreLayoutError
from rocketidx.output.safety import check_time_index_dir
from rocketidx.storage import is_uri

__all__ = ["TimeIndexRequest", "TimeIndexResult", "timeindex"]


@dataclass(frozen=True)
class TimeIndexResult:
    """A write's figures (``segments``, ``blocks``, ``block_bytes``, ``bytes_read``) or a check's rows (one
    per segment: ``segment``, ``status``) and ``problems`` (missing or stale), with the wall time."""

    wall_s: float
    segments: int = 0
    blocks: int = 0
    block_bytes: int = 0
    bytes_read: int = 0
    rows: list[dict] = field(default_factory=list)
    problems: int = 0


def timeindex(request: TimeIndexRequest, progress=None) -> TimeIndexResult:
    """Write the time index ``request`` names, or with ``check`` compare it with a fresh scan."""
    r = request
    if is_uri(r.out) or is_uri(r.commitlog):
        raise StoreLayoutError(r.out if is_uri(r.out) else r.commitlog,
                               "the time index reads a local CommitLog and writes a local directory")
    if os.path.basename(os.path.normpath(r.out)) == "index":
        raise StoreLayoutError(r.out, "a broker opens every file in store/index as an IndexFile: choose another "
                                      "directory (e.g. OUT/_timeindex)")
    if not r.check:
        check_time_index_dir(r.out)
    segments = list_segments(r.commitlog)
    t0 = time.monotonic()
    if r.check:
        olds = {seg.name: load(r.out, seg) for seg in segments}
        # Each segment is checked at its own block size (one scan per size found, usually one).
        sizes = {o.block_bytes for o in olds.values() if o} or {r.block_bytes or DEFAULT_BLOCK_BYTES}
        fresh = {(i.segment, size): i for size in sizes
                 for i in scan_segments(segments, block_bytes=size, check_crc=r.check_crc)}
        rows = []
        for seg in segments:
            old = olds[seg.name]
            new = fresh.get((seg.name, old.block_bytes if old else next(iter(sizes))))
            status = ("not read (the log stops before it)" if new is None and old is None else
                      "missing" if old is None else "stale" if new is None or not old.same(new) else "ok")
            rows.append({"segment": seg.name, "status": status})
        bad = [row for row in rows if row["status"] in ("missing", "stale")]
        return TimeIndexResult(time.monotonic() - t0, rows=rows, problems=len(bad))
    block = r.block_bytes or DEFAULT_BLOCK_BYTES
    indexes = scan_segments(segments, block_bytes=block, check_crc=r.check_crc)
    for idx in indexes:
        save(r.out, idx)
    return TimeIndexResult(round(time.monotonic() - t0, 3), len(indexes), sum(len(i.entries) for i in indexes),
                           block, sum(i.stop_offset for i in indexes))
