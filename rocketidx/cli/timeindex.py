"""``rocketidx timeindex``: write or check a CommitLog's sparse time index (:mod:`rocketidx.commitlog.timeindex`).

In: ``--commitlog`` (a CommitLog or store directory) and ``--out`` (the index directory, e.g. a build
output's ``_timeindex``, never a broker's ``store/index``). Out: one ``<segment>.tix`` per segment read,
and a line per segment with ``--check``. Exit 0 done (or, with ``--check``, every segment's index
matches a fresh scan), 1 ``--check`` found a missing or stale index, 2 the command could not run.

A build keeps this index by itself (``OUT/_timeindex``) whenever it reads a whole log; the command is for
an index of a log no build has read, another block size, or a check.
Wiring (in ``rocketidx/cli.py``): ``timeindex_cli.add_parser(sub)`` and ``"timeindex": cmd_timeindex``.
"""
from __future__ import annotations

import argparse
import json
import os
import time

from rocketidx.errors import StoreLayoutError
from rocketidx.units import size_arg


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("timeindex", help="write or check a CommitLog's sparse time index",
                              description="One file per segment with the store-time range of every block of "
                                          "N bytes; --from-time/--to-time builds read only the blocks they need.")
    p.add_argument("--commitlog", required=True, help="CommitLog directory, or a store holding commitlog/")
    p.add_argument("--out", required=True, help="time index directory (a build keeps one in OUT/_timeindex)")
    p.add_argument("--block-bytes", type=size_arg("--block-bytes"), default=None,
                   help="bytes per entry (default 1m)")
    p.add_argument("--no-crc", action="store_true", help="skip the body CRC check (a build with --no-crc uses it)")
    p.add_argument("--check", action="store_true", help="compare the index with a fresh scan; change nothing")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def cmd_timeindex(a) -> int:
    from rocketidx.storage import is_uri
    from rocketidx.commitlog.segments import list_segments
    from rocketidx.commitlog.timeindex import DEFAULT_BLOCK_BYTES, load, save, scan_segments
    if is_uri(a.out) or is_uri(a.commitlog):
        raise StoreLayoutError(a.out if is_uri(a.out) else a.commitlog,
                               "the time index reads a local CommitLog and writes a local directory")
    if os.path.basename(os.path.normpath(a.out)) == "index":
        raise StoreLayoutError(a.out, "a broker opens every file in store/index as an IndexFile: choose another "
                                      "directory (e.g. OUT/_timeindex)")
    if not a.check:
        from rocketidx.output.safety import check_time_index_dir
        check_time_index_dir(a.out)
    segments = list_segments(a.commitlog)
    t0 = time.monotonic()
    check_crc = not a.no_crc
    if a.check:
        olds = {seg.name: load(a.out, seg) for seg in segments}
        # Each segment is checked at its own block size (one scan per size found, usually one).
        sizes = {o.block_bytes for o in olds.values() if o} or {a.block_bytes or DEFAULT_BLOCK_BYTES}
        fresh = {(i.segment, size): i for size in sizes
                 for i in scan_segments(segments, block_bytes=size, check_crc=check_crc)}
        rows = []
        for seg in segments:
            old = olds[seg.name]
            new = fresh.get((seg.name, old.block_bytes if old else next(iter(sizes))))
            status = ("not read (the log stops before it)" if new is None and old is None else
                      "missing" if old is None else "stale" if new is None or not old.same(new) else "ok")
            rows.append({"segment": seg.name, "status": status})
        bad = [r for r in rows if r["status"] in ("missing", "stale")]
        if a.json:
            print(json.dumps({"segments": rows, "problems": len(bad)}))
        else:
            for r in rows:
                print(f"{r['segment']}  {r['status']}")
            print(f"{len(rows) - len(bad)} of {len(rows)} segments: time index as the CommitLog reads now"
                  f" ({time.monotonic() - t0:.2f}s)")
        return 1 if bad else 0
    block = a.block_bytes or DEFAULT_BLOCK_BYTES
    indexes = scan_segments(segments, block_bytes=block, check_crc=check_crc)
    for idx in indexes:
        save(a.out, idx)
    result = {"out": a.out, "segments": len(indexes), "blocks": sum(len(i.entries) for i in indexes),
              "block_bytes": block, "bytes_read": sum(i.stop_offset for i in indexes),
              "wall_s": round(time.monotonic() - t0, 3)}
    if a.json:
        print(json.dumps(result))
    else:
        print(f"time index of {result['segments']} segments: {result['blocks']:,} blocks of {block:,} bytes in "
              f"{a.out} (read {result['bytes_read']:,} bytes in {result['wall_s']:.2f}s)")
    return 0
