"""``rocketidx stats``: index statistics in the terminal (tables) or as JSON for scripts.

In: ``--index DIR`` (a build output or a broker's ``store/index``), optionally ``--commitlog DIR``, sizing
targets and the Spark master. Out: on stdout, readable tables (files, chains, key hashes, hot keys,
topics and true collisions with the CommitLog, sizing advice) or, with ``--json``, one JSON object with
``summary`` and every table as a list of records. Exit 0 when the statistics were computed, 2 when they
could not be (a typed error, one line on stderr naming the file).

The statistics are computed in this process (:mod:`rocketidx.stats.in_process`) or on Spark
(:mod:`rocketidx.spark.stats`), the same tables either way, by :func:`rocketidx.ops.stats.stats`, which
chooses the engine (:func:`rocketidx.ops.engine.engine_for`) on the bytes to read (the index files' allocated blocks, plus the CommitLog's with ``--commitlog``);
``--in-process`` or ``--master`` decide, and spark-submit always means Spark. A Spark session starts
without its UI or progress bars so stdout stays clean.
Wiring (in ``rocketidx/cli.py``): ``stats_cli.add_parser(sub)`` in ``_parser()`` and
``"stats": stats_cli.cmd_stats`` in ``COMMANDS``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

from rocketidx.errors import RocketIdxError
from rocketidx.units import count_arg, duration_arg, format_duration, format_utc

def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("stats", help="index health and sizing statistics (in process or on Spark)",
                              description="How full each file is, chain lengths, key-hash collisions, hot keys, "
                                          "traffic per time bucket, and the hashSlotNum/indexNum that fit it.")
    p.add_argument("--index", help="build output, or a directory of IndexFiles (store/index); a path or a URI")
    from rocketidx.cli.common import add_broker_conf
    add_broker_conf(p)
    p.add_argument("--consumequeue", help="ConsumeQueue statistics instead: per topic and queue the files, entries, "
                                          "slots and blank slots (with --commitlog, first and last store time); a "
                                          "build output, a broker store or a consumequeue directory")
    p.add_argument("--commitlog", help="CommitLog (or store) directory: topics, key strings, true collisions")
    p.add_argument("--json", action="store_true", help="print one JSON object (summary and every table)")
    from rocketidx.units import HASH_SLOTS_HELP, INDEX_NUM_HELP
    p.add_argument("--hash-slots", type=count_arg("--hash-slots", 1), default=None, help=HASH_SLOTS_HELP)
    p.add_argument("--index-num", type=count_arg("--index-num", 1), default=None, help=INDEX_NUM_HELP)
    p.add_argument("--bucket", type=duration_arg("--bucket", 1), default=None,
                   help="time bucket, e.g. 10m or 1h, and the traffic per bucket in the text too (default: ~96 "
                        "buckets over the index's span, in --json only)")
    p.add_argument("--top", type=count_arg("--top", 1), default=10,
                   help="longest chains and hot keys to list (default 10)")
    p.add_argument("--target-chain", type=float, default=1.5,
                   help="sizing: mean chain length to aim for in the fullest file (default 1.5)")
    p.add_argument("--target-files-per-day", type=float, default=24.0, help="sizing: files per day (default 24)")
    p.add_argument("--headroom", type=float, default=2.0, help="sizing: growth factor on the peak (default 2)")
    p.add_argument("--no-crc", action="store_true", help="skip the CommitLog body CRC check")
    p.add_argument("--in-process", action="store_true", help="compute in this process, no Spark")
    p.add_argument("--master", default=None, help="compute on Spark with this master (default: by size)")
    p.add_argument("--spark-conf", default=None, help="break-even size (default conf/spark.json)")
    return p


def cmd_stats(a) -> int:
    from rocketidx.config import stats_request
    from rocketidx.ops.stats import stats
    try:
        request = stats_request(a.index, consumequeue=a.consumequeue, commitlog=a.commitlog,
                                broker_conf=a.broker_conf, hash_slot_num=a.hash_slots, index_num=a.index_num,
                                bucket_ms=a.bucket, top=a.top, target_chain=a.target_chain,
                                target_files_per_day=a.target_files_per_day, headroom=a.headroom,
                                check_crc=not a.no_crc, in_process=a.in_process, master=a.master,
                                spark_conf=a.spark_conf)
        if bool(a.index) == bool(a.consumequeue):
            print("rocketidx stats: give --index DIR or --consumequeue DIR", file=sys.stderr)
            return 2
        result = stats(request)
    except RocketIdxError as e:
        print(f"rocketidx stats: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if result.queues is not None:
        return _print_queues(result, a.json, with_times=bool(a.commitlog))
    if result.empty_build:
        return _print_empty_build(result.summary, a.json)
    if a.json:
        print(json.dumps({"summary": result.summary, **{k: _records(v) for k, v in result.tables.items()},
                          "engine": result.engine.as_dict()}, default=_plain))
    else:
        print_stats(result.summary, result.tables, buckets=a.bucket is not None)
        print(f"\nengine: {result.engine.name} ({result.engine.reason})")
    return 0


def _print_empty_build(summary: dict, as_json: bool) -> int:
    """A build output that committed no IndexFile: an index with nothing in it, not an error."""
    if as_json:
        print(json.dumps({"summary": summary, "engine": None}))
    else:
        print(f"index: {summary['index']}: an empty build output (0 IndexFiles, 0 entries; "
              f"{summary['messages'] or 0:,} messages read)")
    return 0


def _plain(value):
    """JSON for numpy scalars and arrays that pandas hands back."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _records(df) -> list[dict]:
    rows = df.to_dict(orient="records")
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]


# --- terminal tables ------------------------------------------------------------------------------

def _utc(ms) -> str:
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "-"
    return format_utc(ms)


def _fmt(v, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if spec == "i":
        return f"{int(v):,}"
    if spec == "%":
        return f"{100 * float(v):.1f}%"
    if spec.startswith("f"):
        return f"{float(v):.{spec[1:] or 2}f}"
    if spec == "B":
        return _bytes(v)
    if spec == "t":
        return _utc(v)
    text = str(v)
    return text if len(text) <= 48 else text[:47] + "…"  # a 130-character retry topic would swamp the table


def _bytes(n) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n}"


def format_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Fixed-width text table; ``columns`` are (key, heading, format) with formats of :func:`_fmt`
    (text left-aligned, numbers right-aligned)."""
    cells = [[_fmt(r.get(k), f) for k, _, f in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(columns)]
    left = [f == "s" for _, _, f in columns]
    line = lambda vals: "  ".join(v.ljust(w) if lft else v.rjust(w)  # noqa: E731
                                  for v, w, lft in zip(vals, widths, left)).rstrip()
    return "\n".join([line([h for _, h, _ in columns])] + [line(c) for c in cells])


def print_stats(summary: dict, tables: dict, out=None, *, buckets: bool = False) -> None:
    """The tables as text. ``buckets``: the traffic per time bucket too (``--bucket`` asks for it; the
    default's ~96 rows would bury the rest, and ``--json`` always has them)."""
    out = out or sys.stdout
    p = lambda *args: print(*args, file=out)  # noqa: E731
    s = summary
    windows = f", {s['windows']} windows" if s.get("windows") else ""
    p(f"index {s['index']}: {s['files']} files, {s['entries']:,} entries, {s['messages']:,} messages{windows}, "
      f"{_utc(s['begin_timestamp'])} .. {_utc(s['end_timestamp'])} UTC")
    p(f"hashSlotNum {s['hash_slot_num']:,}  indexNum {s['index_num']:,}  mean fill {100 * s['mean_fill_ratio']:.1f}%  "
      f"on disk {_bytes(s['disk_bytes'])} of {_bytes(s['apparent_bytes'])} apparent")
    p(f"chains: {s['used_slots']:,} used slots, mean {s['mean_chain']:.2f}, p50 {s['p50_chain']}, "
      f"p90 {s['p90_chain']}, p99 {s['p99_chain']}, max {s['max_chain']}")
    p(f"key hashes: {s['distinct_key_hashes']:,} distinct, {s['key_hashes_with_repeats']:,} with two or more entries")
    if "distinct_keys" in s and not s["colliding_key_hashes"]:
        p(f"keys: {s['distinct_keys']:,} distinct; no key hash is shared by two keys: no query needs client-side "
          "filtering")
    elif "distinct_keys" in s:
        p(f"keys: {s['distinct_keys']:,} distinct; {s['colliding_key_hashes']:,} key hashes are shared by "
          f"{s['colliding_keys']:,} different keys: {100 * s['share_of_keys_needing_filtering']:.3f}% of keys "
          f"({100 * s['share_of_entries_needing_filtering']:.3f}% of entries) need client-side filtering")
    sections = [
        ("files", "Files", [("name", "name", "s"), ("window_start_ms", "window (UTC)", "t"), ("seq", "seq", "i"),
                            ("entries", "entries", "i"), ("fill_ratio", "fill", "%"), ("used_slots", "used slots", "i"),
                            ("load_factor", "load", "f3"), ("mean_chain", "mean chain", "f2"),
                            ("p99_chain", "p99", "i"), ("max_chain", "max", "i"),
                            ("distinct_hashes", "key hashes", "i"), ("disk_bytes", "on disk", "B")]),
        ("buckets", f"Traffic per {format_duration(s['bucket_ms'])} bucket (from the items' times)",
         [("bucket_start_ms", "bucket (UTC)", "t"), ("entries", "entries", "i"), ("messages", "messages", "i"),
          ("keys_per_message", "keys/msg", "f2")]),
        ("chains", "Chain lengths (slots per length, all files)", None),
        ("longest_chains", "Longest chains", [("name", "file", "s"), ("slot", "slot", "i"), ("length", "length", "i"),
                                              ("distinct_hashes", "key hashes", "i"), ("head_item", "head item", "i")]),
        ("collisions", "Entries per key hash", [("entries_per_hash", "entries/hash", "i"),
                                                ("key_hashes", "key hashes", "i"), ("entries", "entries", "i")]),
        ("hot_keys", "Hot keys", [("key_hash", "key hash", "i"), ("entries", "entries", "i"), ("files", "files", "i"),
                                  ("key", "key", "s")]),
        ("topics", "Topics", [("topic", "topic", "s"), ("messages", "messages", "i"),
                              ("indexed_messages", "indexed", "i"), ("entries", "entries", "i"),
                              ("keys_per_message", "keys/msg", "f2")]),
        ("true_collisions", "True collisions (one key hash, several keys)",
         [("key_hash", "key hash", "i"), ("distinct_keys", "keys", "i"), ("entries", "entries", "i"),
          ("key", "keys", "s")]),
        ("sizing", "Sizing", [("scenario", "scenario", "s"), ("hash_slot_num", "hashSlotNum", "i"),
                              ("index_num", "indexNum", "i"), ("file_bytes", "file", "B"),
                              ("entries_per_file", "entries/file", "i"), ("predicted_mean_chain", "mean chain", "f2"),
                              ("predicted_files_per_day", "files/day", "f1"), ("note", "note", "s")]),
    ]
    for name, title, columns in sections:
        df = tables.get(name)
        if df is None or (name == "buckets" and not buckets):
            continue
        p("")
        p(f"{title}:")
        if name == "chains":
            h = df.groupby("chain_length")["slots"].sum()
            p("  " + "  ".join(f"{int(k)}: {int(v):,}" for k, v in h.items()) if len(h) else "  (none)")
            continue
        rows = df.to_dict(orient="records")
        for r in rows:
            keys = r.get("keys")
            if keys is not None and not isinstance(keys, float):  # a left join leaves NaN where no key was read
                keys = list(keys)
                r["key"] = ", ".join(map(str, keys[:3])) + (" ..." if len(keys) > 3 else "")
        if name == "sizing":
            t = rows[0] if rows else {}
            p(f"  targets: mean chain <= {t.get('target_mean_chain')}, files/day <= {t.get('target_files_per_day')}; "
              "predictions assume hashes spread evenly over slots")
        p(format_table(rows, columns) if rows else "  (none)")


def _print_queues(result, as_json: bool, *, with_times: bool) -> int:
    """``stats --consumequeue``: one row per queue (the store times with ``--commitlog``)."""
    from rocketidx.ops.stats import QUEUE_COLUMNS
    summary, rows = result.summary, result.queues
    if as_json:
        print(json.dumps({"summary": summary, "queues": rows}))
        return 0
    print(f"consumequeue: {summary['consumequeue']}: {summary['topics']} topics, {summary['queues']} queues, "
          f"{summary['files']} files, {summary['entries']:,} entries, {summary['blank_slots']:,} blank slots")
    heads = {"first_store_time_ms": "first stored (UTC)", "last_store_time_ms": "last stored (UTC)"}
    columns = [(c, heads.get(c, c.replace("_", " ")), "s" if c == "topic" else "") for c in QUEUE_COLUMNS
               if with_times or "time" not in c]
    shown = [{**r, **{k: _utc(r[k]) for k in ("first_store_time_ms", "last_store_time_ms") if r.get(k)}} for r in rows]
    print(format_table(shown, columns))
    return 0
