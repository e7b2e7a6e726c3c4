"""Helpers shared by the split and Spark tests: the core's sequential reading (the oracle), the core's
splits read one by one and stitched by their stops (what Spark's tasks do, without a JVM), and build
comparisons."""
from __future__ import annotations

import filecmp
import json
import os
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
        diffs += [n for n in na if not filecmp.cmp(a / "index" / n, b / "index" / n, shallow=False)]
    if not (b / "_SUCCESS").exists():
        diffs.append("_SUCCESS missing")
    return diffs
