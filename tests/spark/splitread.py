"""Helpers shared by the Spark tests: the core's sequential reading (the oracle), the source's splits
read one by one in this process (no JVM), and build comparisons."""
from __future__ import annotations

import filecmp
import json
import os
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from rocketidx.messages import MESSAGE_SCHEMA, CommitLogReader
from rocketidx.segments import list_segments
from rocketidx.spark.source import (SourceOptions, list_store_segments, plan_partitions, read_split,
                                    resolve_stops, resolved_whole, info_from_stop_row)


def core_read(store) -> tuple[pa.Table, CommitLogReader]:
    """Every message the broker's recovery reads, and the reader (stop, stops, bytes_read)."""
    reader = CommitLogReader(list_segments(store))
    return pa.Table.from_batches(list(reader), MESSAGE_SCHEMA), reader


def split_read(store, **options):
    """The two-pass ``read_messages`` done in this process, split after split: (table, resolved, rereads).

    ``rereads`` counts the passes that found splits disagreeing (then read those segments whole).
    """
    opts = SourceOptions.parse(dict({k: str(v) for k, v in options.items()}, path=str(store)))
    segments = list_store_segments(opts.path, from_offset=opts.from_offset, to_offset=opts.to_offset)
    rereads = 0
    while True:
        stops = replace(opts, output="stops")
        rows = [b.to_pylist()[0] for p in plan_partitions(segments, stops) for b in read_split(p, stops)]
        resolved = resolve_stops(info_from_stop_row(r) for r in rows)
        if not resolved.chain_breaks:
            break
        rereads += 1
        assert rereads < 2, resolved.chain_breaks
        opts = replace(opts, whole_segments=resolved_whole(opts, resolved))
    final = replace(opts, output="messages", skip_offsets=tuple(sorted(set(opts.skip_offsets)
                                                                        | set(resolved.skip_intervals))))
    batches = [b for p in plan_partitions(segments, final) for b in read_split(p, final)]
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
