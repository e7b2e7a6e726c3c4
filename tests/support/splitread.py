"""Helpers shared by the split and Spark tests: the core's sequential reading (the oracle), the core's
splits read one by one and stitched by their stops (what Spark's tasks do, without a JVM), and build
comparisons."""
from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from rocketidx.commitlog.columns import MESSAGE_SCHEMA, records_to_batch
from rocketidx.commitlog.readers import CommitLogReader, read_split
from rocketidx.commitlog.segments import list_segments
from rocketidx.commitlog.splits import SplitSpec, plan_splits, resolve_stops


def core_read(store) -> tuple[pa.Table, CommitLogReader]:
    """Every message the broker's recovery reads, and the reader (stop, stops, bytes_read)."""
    reader = CommitLogReader(list_segments(store))
    return pa.Table.from_batches(list(reader), MESSAGE_SCHEMA), reader


def _info(split, spec: SplitSpec):
    reading = read_split(split, spec, chunks=False)
    while True:
        try:
            next(reading)
        except StopIteration as done:
            return done.value


def split_read(store, **spec):
    """The two-pass ``read_messages`` done in this process, split after split: (table, resolved, rereads).

    ``spec``: :class:`SplitSpec` fields. ``rereads`` counts the passes that found splits disagreeing
    (then read those segments whole).
    """
    spec = SplitSpec(**spec)
    segments = list_segments(str(store), from_offset=spec.from_offset, to_offset=spec.to_offset)
    rereads = 0
    while True:
        resolved = resolve_stops(_info(s, spec) for s in plan_splits(segments, spec))
        if not resolved.chain_breaks:
            break
        rereads += 1
        assert rereads < 2, resolved.chain_breaks
        spec = replace(spec, whole_segments=resolved.whole_segments(spec.whole_segments))
    final = replace(spec, skip_offsets=tuple(sorted(set(spec.skip_offsets) | set(resolved.skip_intervals))))
    batches = [records_to_batch(c.buf, c.segment, c.recs) for s in plan_splits(segments, final)
               for c in read_split(s, final)]
    return pa.Table.from_batches(batches, MESSAGE_SCHEMA), resolved, rereads


def _data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """Where a file may hold bytes other than zero: its data extents (``SEEK_DATA``/``SEEK_HOLE``); the rest are
    holes, which read as zeros. A file system that cannot tell holes reports the whole file as data."""
    if not hasattr(os, "SEEK_DATA"):
        return [(0, size)]
    extents, at = [], 0
    while at < size:
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # nothing but a hole from ``at`` to the end
                break
            if e.errno == errno.EINVAL:  # SEEK_DATA not supported here: all of it is data
                return [(0, size)]
            raise
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        extents.append((start, end))
        at = end
    return extents


def same_bytes(a: Path, b: Path, chunk: int = 1 << 22) -> bool:
    """Whether two regular files hold the same bytes (``filecmp.cmp(a, b, shallow=False)``'s answer). A full-size
    IndexFile is ~420 MB, nearly all of it a hole, so only where either file has data is read and compared
    (4 MiB at a time): everywhere else both read as zeros."""
    sa, sb = os.stat(a), os.stat(b)
    if not (stat.S_ISREG(sa.st_mode) and stat.S_ISREG(sb.st_mode)) or sa.st_size != sb.st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        spans = sorted(_data_extents(fa.fileno(), sa.st_size) + _data_extents(fb.fileno(), sb.st_size))
        merged: list[list[int]] = []
        for start, end in spans:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in merged:
            for at in range(start, end, chunk):
                n = min(chunk, end - at)
                if os.pread(fa.fileno(), n, at) != os.pread(fb.fileno(), n, at):
                    return False
    return True


def same_build(a: Path, b: Path) -> list[str]:
    """What differs between two build outputs (manifest and files byte for byte); empty when equal."""
    diffs = []
    ma = json.loads((a / "_manifest.json").read_text())
    mb = json.loads((b / "_manifest.json").read_text())
    if ma != mb:
        diffs += [f"manifest[{k!r}]" for k in sorted(set(ma) | set(mb)) if ma.get(k) != mb.get(k)]
    na, nb = sorted(os.listdir(a / "index")), sorted(os.listdir(b / "index"))
    if na != nb:
        diffs.append(f"file names {na[:3]}... != {nb[:3]}...")
    else:
        diffs += [n for n in na if not same_bytes(a / "index" / n, b / "index" / n)]
    if not (b / "_SUCCESS").exists():
        diffs.append("_SUCCESS missing")
    return diffs
