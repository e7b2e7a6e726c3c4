"""``rocketidx timeindex``: write or check a CommitLog's sparse time index (:mod:`rocketidx.commitlog.timeindex`).

In: ``--commitlog`` (a CommitLog or store directory) and ``--out`` (the index directory, e.g. a build
output's ``_timeindex``, never a broker's ``store/index``). Out: one ``<segment>.tix`` per segment read,
and a line per segment with ``--check``. Exit 0 done (or, with ``--check``, every segment's index
matches a fresh scan), 1 ``--check`` found a missing or stale index, 2 the command could not run.

A build keeps this index by itself (``OUT/_timeindex``) whenever it reads a whole log; the command is for
an index of a log no build has read, another block size, or a check. The work is
:func:`rocketidx.ops.timeindex.timeindex`'s; this module turns flags into its request and its result into text.
Wiring (in ``rocketidx/cli.py``): ``timeindex_cli.add_parser(sub)`` and ``"timeindex": cmd_timeindex``.
"""
from __future__ import annotations

import argparse
import json

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
    from rocketidx.config import timeindex_request
    from rocketidx.ops.timeindex import timeindex
    result = timeindex(timeindex_request(a.commitlog, a.out, block_bytes=a.block_bytes, check_crc=not a.no_crc,
                                         check=a.check))
    if a.check:
        if a.json:
            print(json.dumps({"segments": result.rows, "problems": result.problems}))
        else:
            for r in result.rows:
                print(f"{r['segment']}  {r['status']}")
            print(f"{len(result.rows) - result.problems} of {len(result.rows)} segments: time index as the CommitLog "
                  f"reads now ({result.wall_s:.2f}s)")
        return 1 if result.problems else 0
    summary = {"out": a.out, "segments": result.segments, "blocks": result.blocks, "block_bytes": result.block_bytes,
               "bytes_read": result.bytes_read, "wall_s": result.wall_s}
    if a.json:
        print(json.dumps(summary))
    else:
        print(f"time index of {result.segments} segments: {result.blocks:,} blocks of {result.block_bytes:,} bytes "
              f"in {a.out} (read {result.bytes_read:,} bytes in {result.wall_s:.2f}s)")
    return 0
