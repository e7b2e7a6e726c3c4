"""``rocketidx``: gen, build, query, verify, backfill, demo.

Exit codes (:func:`exit_code`, which the spark-submit jobs use too): 0 done (a build whose reading stopped
at a corrupt record still exits 0: it indexed what the broker's recovery keeps and prints where and why it
stopped); 1 the input has problems (``verify`` found some, a ``--strict`` build stopped early or left
entries out); 2 the command could not run (bad arguments, a path that is not a CommitLog or index, a locked
store or output, any rocketidx error or OSError), with one line on stderr naming the file and, for bad
data, the byte offset; 130 interrupted (Ctrl-C, SIGTERM); 141, quietly, when stdout's reader left early
(``| head``).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Callable

from rocketidx import layout as L
from rocketidx import interrupts, storage
from rocketidx.errors import RocketIdxError, StoreLayoutError
from rocketidx.units import HASH_SLOTS_HELP, INDEX_NUM_HELP, count_arg, duration_arg, size_arg, time_arg


def _add_engine_arguments(p: argparse.ArgumentParser, what: str, spark_conf: str | None, engine_flag: bool) -> None:
    """``--in-process`` (where offered) and the Spark flags, as build and backfill both take them."""
    if engine_flag:
        p.add_argument("--in-process", action="store_true",
                       help=f"{what} in this Python process with the core alone, no Spark (small stores, no JVM)")
    p.add_argument("--master", default=None,
                   help="run on Spark with this master (default: the engine is chosen by size: in process below "
                        "engine_break_even in --spark-conf, else Spark on local[*]; under spark-submit, its master)")
    p.add_argument("--spark-conf", default=spark_conf, help="Spark settings and split size (default conf/spark.json)")
    p.add_argument("--split-bytes", type=size_arg("--split-bytes"), default=None,
                   help="byte range per read task (default 128m)")
    p.add_argument("--partitions", type=count_arg("--partitions"), default=None,
                   help="writer partitions (default: cores)")


def add_build_arguments(b: argparse.ArgumentParser, *, conf: str | None = None, spark_conf: str | None = None,
                        engine_flag: bool = True) -> None:
    """The build's flags, for ``rocketidx build`` and ``jobs/nightly_rebuild.py`` alike (``conf``/``spark_conf``:
    their defaults; ``engine_flag``: offer ``--in-process``, which a spark-submit job does not)."""
    b.add_argument("--commitlog", required=True,
                   help="CommitLog directory, or a store holding commitlog/ (a path or a URI: s3://, hdfs://...)")
    b.add_argument("--out", required=True, help="output directory (a path or a URI); OUT/index, OUT/_manifest.json")
    b.add_argument("--hash-slots", type=count_arg("--hash-slots"), default=None,
                   help=f"default {L.DEFAULT_HASH_SLOT_NUM}")
    b.add_argument("--index-num", type=count_arg("--index-num"), default=None, help=f"default {L.DEFAULT_INDEX_NUM}")
    b.add_argument("--window", type=duration_arg("--window"), default=None,
                   help="window length: 1h, 15m, 90s, 250ms, or a bare number of milliseconds "
                        "(default 1h; 0 = one window)")
    b.add_argument("--timezone", default=None, help="zone of file names (default: this host's, as the broker)")
    b.add_argument("--no-crc", action="store_true", help="skip the body CRC check")
    b.add_argument("--conf", default=conf, help="JSON settings file (see conf/defaults.json)")
    b.add_argument("--json", action="store_true", help="print the summary as JSON")
    b.add_argument("--overwrite", action="store_true",
                   help="replace an output that holds a build of another CommitLog directory, range, window or "
                        "sizes (default: refuse; a rebuild of the same kind needs no flag, even after the log grew)")
    b.add_argument("--strict", action="store_true",
                   help="exit 1 when reading stopped early (an invalid record or a zero tail before the end) "
                        "or a broker rule left entries out (PHYSICALOFFSET fields that are not their records' "
                        "offsets, messages below an IndexFile's endPhyOffset)")
    _add_engine_arguments(b, "build", spark_conf, engine_flag)
    b.add_argument("--from-offset", type=count_arg("--from-offset"), default=None,
                   help="first CommitLog offset to index")
    b.add_argument("--to-offset", type=count_arg("--to-offset"), default=None,
                   help="index messages starting before this offset")
    b.add_argument("--from-time", type=time_arg("--from-time"), default=None,
                   help="epoch ms or ISO-8601 store time (inclusive)")
    b.add_argument("--to-time", type=time_arg("--to-time"), default=None,
                   help="epoch ms or ISO-8601 store time (exclusive)")
    b.add_argument("--time-index", default=None,
                   help="time index directory: a --from/--to-time build reads only the blocks it needs, a whole "
                        "read keeps it up to date (default OUT/_timeindex for a local OUT; 'none': neither)")


def add_backfill_arguments(bf: argparse.ArgumentParser, *, spark_conf: str | None = None,
                           engine_flag: bool = True) -> None:
    """The backfill's flags, for ``rocketidx backfill`` and ``jobs/backfill.py`` alike."""
    bf.add_argument("--store", required=True, help="the broker's store directory (commitlog/, index/, checkpoint)")
    bf.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    bf.add_argument("--window", type=duration_arg("--window"), default=0,
                    help="window length of the new files, as build's --window (a bare number is "
                         "milliseconds; default 0: one sequence, as the broker writes)")
    bf.add_argument("--hash-slots", type=count_arg("--hash-slots"), default=None,
                    help="default: read off the existing files, else the broker's 5000000")
    bf.add_argument("--index-num", type=count_arg("--index-num"), default=None,
                    help="default: read off the existing files, else the broker's 20000000")
    bf.add_argument("--timezone", default="local", help="zone of new file names (default: this host's)")
    bf.add_argument("--no-crc", action="store_true", help="skip the body CRC check while reading the CommitLog")
    bf.add_argument("--json", action="store_true", help="print the plan and result as JSON")
    _add_engine_arguments(bf, "rebuild", spark_conf, engine_flag)


DEMO_MESSAGES = 300_000  # the sample store `make run` generates


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rocketidx", description="Rebuild, query and inspect RocketMQ IndexFiles.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug)")
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("gen", help="write a sample broker store (CommitLog segments) from a seed",
                       description="Write a valid broker store (STORE/commitlog/ segments of one size, a blank "
                                   "record where a message does not fit, a zero tail after the last one), the same "
                                   "bytes for the same seed and settings. Prints a summary; --json for one JSON line.")
    g.add_argument("--out", required=True, help="store directory to create (commitlog/ goes inside)")
    g.add_argument("--messages", type=count_arg("--messages"), required=True, help="how many messages to write")
    g.add_argument("--segment-bytes", type=size_arg("--segment-bytes"), default=64 * 1024**2, help="segment size (default 64m)")
    g.add_argument("--body-bytes", type=count_arg("--body-bytes"), default=300, help="mean body size (default 300)")
    g.add_argument("--topics", type=count_arg("--topics"), default=4,
                   help="how many topics the messages spread over (Topic0, Topic1, ...; default 4)")
    g.add_argument("--keys-per-message", type=count_arg("--keys-per-message"), default=2, help="most KEYS per message (default 2)")
    g.add_argument("--span", type=duration_arg("--span"), default=24 * 3_600_000, help="time span (default 24h)")
    g.add_argument("--start-ms", type=count_arg("--start-ms"), default=1_700_000_000_000,
                   help="store time of the first message, epoch ms (default 1700000000000: 2023-11-14T22:13:20Z)")
    g.add_argument("--seed", type=int, default=1,
                   help="random seed: the same seed and settings give the same bytes (default 1)")
    g.add_argument("--clock-steps", type=count_arg("--clock-steps"), default=0,
                   help="places where the broker's clock steps back (default 0: store times only rise)")
    g.add_argument("--clock-back", type=duration_arg("--clock-back"), default=0,
                   help="how far the clock steps back at each place (e.g. 90m)")
    g.add_argument("--replace", action="store_true",
                   help="overwrite the CommitLog of a directory gen did not write (default: refuse)")
    g.add_argument("--json", action="store_true", help="print the summary as one JSON line")

    add_build_arguments(sub.add_parser(
        "build", help="build the index of a CommitLog into OUT/index and OUT/_manifest.json",
        description="Build the broker's IndexFiles of a CommitLog into OUT/index, with OUT/_manifest.json, and "
                    "commit them atomically. Runs in this process or on Spark, the same bytes either way: the engine "
                    "is chosen by the bytes to read (engine_break_even in conf/spark.json) unless --in-process or "
                    "--master says which."))

    d = sub.add_parser("demo", help="generate a sample store (once), build its index, show example queries",
                       description="What `make run` runs: generate a sample store in DIR/store unless one is there, "
                                   "build its index in process and on local Spark (the same bytes, with what each "
                                   "engine costs), and look a few of its keys up.")
    d.add_argument("--dir", default="sample", help="where the sample store and output go (default sample/)")
    d.add_argument("--messages", type=count_arg("--messages"), default=None,
                   help=f"messages in the sample store when it is generated (default {DEMO_MESSAGES}); a store "
                        "already in DIR is kept as it is (delete DIR/store to generate another)")
    d.add_argument("--master", default="local[*]", help="Spark master for the comparison run (default local[*])")
    d.add_argument("--in-process", action="store_true", help="build in process only, skip the Spark comparison")

    add_backfill_arguments(sub.add_parser(
        "backfill", help="rebuild the index range a crashed broker lost, into its stopped store",
        description="Rebuild the IndexFiles a crashed broker lost (the range after its last complete file, up to "
                    "the CommitLog's end) into the stopped broker's store: under its lock, with a backup of what "
                    "it replaces and an atomic swap. --dry-run prints the plan and changes nothing."))

    v = sub.add_parser("verify", help="check IndexFiles' structure and, with --commitlog, their content",
                       description="Check IndexFiles (a build output or a broker's store/index): headers, slots and "
                                   "chains; with --commitlog also that every entry points at a message carrying its "
                                   "key and that every key of the log is indexed. Exit 1 when problems are found.")
    v.add_argument("--index", required=True, help="build output, or a directory of IndexFiles (store/index); a path or a URI")
    v.add_argument("--commitlog", help="CommitLog (or store) directory: also check content and coverage")
    v.add_argument("--hash-slots", type=count_arg("--hash-slots"), default=None, help=HASH_SLOTS_HELP)
    v.add_argument("--index-num", type=count_arg("--index-num"), default=None, help=INDEX_NUM_HELP)
    v.add_argument("--no-crc", action="store_true", help="skip the body CRC check while reading")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.add_argument("--in-process", action="store_true", help="check in this process, no Spark")
    v.add_argument("--spark", action="store_true", help="check on Spark (default master local[*])")
    v.add_argument("--master", default=None, help="check on Spark with this master")
    v.add_argument("--spark-conf", default=None, help="Spark settings and break-even (default conf/spark.json)")
    v.add_argument("--split-bytes", type=size_arg("--split-bytes"), default=None, help="on Spark: CommitLog bytes per task")

    from rocketidx import stats_cli, timeindex_cli
    stats_cli.add_parser(sub)
    timeindex_cli.add_parser(sub)

    q = sub.add_parser("query", help="look keys up like queryMsgByKey: offsets, newest first",
                       description="Look keys up as the broker's queryMsgByKey does: the CommitLog offsets of the "
                                   "messages whose key hashes match, newest first, hash collisions included (--exact "
                                   "drops them); --show decodes the messages. One JSON line per key.")
    q.add_argument("--index", help="build output, or a directory of IndexFiles (store/index); a path or a URI")
    q.add_argument("--store", help="a broker store: its index/ answers, its commitlog/ backs --show/--exact")
    q.add_argument("--commitlog", help="CommitLog for --show/--exact when --index is given")
    q.add_argument("--show", action="store_true", help="decode the messages found (a table; JSON lines with --json)")
    q.add_argument("--exact", action="store_true",
                   help="drop offsets whose message does not carry the key (hash collisions)")
    q.add_argument("--json", action="store_true", help="with --show: one JSON object per message")
    q.add_argument("--topic", help="topic of the key to look up (with --key)")
    q.add_argument("--key", help="message key (a KEYS word or the UNIQ_KEY message id) to look up (with --topic)")
    q.add_argument("--queries", help="JSON lines with topic, key and optional begin, end, maxNum")
    q.add_argument("--begin", type=time_arg("--begin"), default=0,
                   help="earliest store time, epoch ms or ISO-8601 (default 0)")
    q.add_argument("--end", type=time_arg("--end"), default=2**63 - 1,
                   help="latest store time, epoch ms or ISO-8601 (default: no end)")
    q.add_argument("--max", type=int, default=L.DEFAULT_MAX_MSGS_NUM_BATCH,
                   help=f"most offsets per key (default {L.DEFAULT_MAX_MSGS_NUM_BATCH}; larger values are capped at "
                        f"{L.DEFAULT_MAX_MSGS_NUM_BATCH}, as the broker caps them, and the answer's maxNum says so)")
    q.add_argument("--hash-slots", type=count_arg("--hash-slots"), default=None, help=HASH_SLOTS_HELP)
    q.add_argument("--index-num", type=count_arg("--index-num"), default=None, help=INDEX_NUM_HELP)
    return p


def cmd_gen(a) -> int:
    from rocketidx.generate import GenConfig, generate_store
    cfg = GenConfig(messages=a.messages, segment_bytes=a.segment_bytes, body_bytes=a.body_bytes, topics=a.topics,
                    keys_per_message=a.keys_per_message, span_ms=a.span, start_ms=a.start_ms, seed=a.seed,
                    clock_steps=a.clock_steps, clock_back_ms=a.clock_back)
    t0 = time.monotonic()
    info = generate_store(a.out, cfg, replace=a.replace)
    info["wall_s"] = round(time.monotonic() - t0, 2)
    if a.json:
        print(json.dumps(info))
    else:
        from rocketidx.engine import human_bytes
        print(f"wrote {info['messages']:,} messages in {info['segments']} segment(s) of "
              f"{human_bytes(info['segment_bytes'])} to {os.path.join(info['store'], 'commitlog')} "
              f"(CommitLog end offset {info['end_offset']:,}, seed {a.seed}) in {info['wall_s']:.2f}s")
    return 0


def _spark_flag_misused(a, command: str, needs: str, flags: tuple[str, ...]) -> bool:
    """Say so on stderr if a Spark-only flag was given where Spark does not run."""
    given = [f for f in flags if getattr(a, f) is not None]
    if given:
        print(f"rocketidx {command}: --{given[0].replace('_', '-')} needs {needs}", file=sys.stderr)
    return bool(given)


def run_build(a: argparse.Namespace) -> int:
    """``rocketidx build`` and ``jobs/nightly_rebuild.py``: the flags :func:`add_build_arguments` made ->
    the engine (:func:`rocketidx.engine.choose_engine`) -> the build -> the summary on stdout."""
    from rocketidx.config import load_config
    from rocketidx.engine import choose_engine, data_bytes
    from rocketidx.segments import list_segments
    from rocketidx import safety
    from rocketidx.segments import commitlog_dir
    in_process = getattr(a, "in_process", False)
    # Before anything is read or created (not even the output's lock): the range, then where the output goes.
    safety.check_range(a.from_offset, a.to_offset, a.from_time, a.to_time)
    safety.check_output_dir(a.out)
    if _time_index_arg(a) not in (None, "auto"):
        safety.check_time_index_dir(a.time_index)
    cfg = load_config(a.conf, hash_slot_num=a.hash_slots, index_num=a.index_num, window_ms=a.window,
                      timezone=a.timezone, check_crc=False if a.no_crc else None)
    if in_process and _spark_flag_misused(a, "build", "Spark (drop --in-process)",
                                          ("spark_conf", "split_bytes", "partitions")):
        return 2
    settings = _spark_settings(a)
    segments = list_segments(a.commitlog, from_offset=a.from_offset, to_offset=a.to_offset)
    filters = {k: v for k, v in (("from_offset", a.from_offset), ("to_offset", a.to_offset),
                                 ("from_time_ms", a.from_time), ("to_time_ms", a.to_time)) if v is not None}
    filtered = bool(filters)
    safety.check_replace(a.out, safety.BuildKind(commitlog_dir(a.commitlog), filters, cfg.window_ms,
                                                 cfg.hash_slot_num, cfg.index_num), getattr(a, "overwrite", False))
    tindex = _time_index_arg(a)
    work = data_bytes(segments, a.from_offset, a.to_offset)
    if (a.from_time is not None or a.to_time is not None) and a.from_offset is None and a.to_offset is None:
        from rocketidx.direct import time_index_dir
        from rocketidx.timeindex import plan_slice
        tdir = time_index_dir(tindex, a.out)
        sliced = plan_slice(segments, tdir, a.from_time, a.to_time, cfg.check_crc)[0] if tdir and segments \
            and not storage.is_remote(a.commitlog) else None
        work = sliced.bytes if sliced else work  # what the slice will read
    engine = choose_engine(work, in_process=in_process,
                           master=a.master, break_even=settings.break_even)
    t0 = time.monotonic()
    spark_stats = None
    if engine.spark:
        summary, spark_stats = _build_on_spark(a, cfg, settings)
    elif filtered:
        from rocketidx.direct import build_index_range
        _, summary = build_index_range(a.commitlog, a.out, cfg, from_offset=a.from_offset, to_offset=a.to_offset,
                                       from_time_ms=a.from_time, to_time_ms=a.to_time, time_index=tindex,
                                       allow_empty=False)
    else:
        from rocketidx.build import build_index
        from rocketidx.progress import ProgressLine
        with ProgressLine("build", enabled=not a.json) as line:
            _, summary = build_index(a.commitlog, a.out, cfg, segments=segments, time_index=tindex,
                                     progress=line.reader(work))
    wall = time.monotonic() - t0
    from rocketidx.build import unread
    left_bytes, left_segments = unread(segments, summary.stop)
    if a.json:
        import resource
        rss_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(json.dumps(dict(summary.as_dict(), engine=engine.as_dict(), process_wall_s=round(wall, 3),
                              driver_peak_rss_mb=rss_mb, spark=spark_stats, unread_bytes=left_bytes,
                              unread_segments=left_segments)))
    else:
        print_summary(summary)
        print(f"engine: {engine.name} ({engine.reason})")
        if spark_stats:
            print_spark_figures(spark_stats, wall)
    if left_bytes:
        st = summary.stop
        print(f"rocketidx build: warning: reading stopped early at {st['segment']} @ byte {st['segment_offset']} "
              f"(offset {st['phy_offset']}): {st['reason']}; {left_bytes:,} bytes in {left_segments} later "
              "segment(s) left unread, as the broker's recovery would" + ("" if a.strict else
                                                                           " (--strict makes this exit 1)"),
              file=sys.stderr)
        if a.strict:
            return 1
    left_out = broker_rule_warning(summary, segments)
    if left_out:
        print("rocketidx build: warning: " + left_out + ("" if a.strict else " (--strict makes this exit 1)"),
              file=sys.stderr)
        if a.strict:
            return 1
    return 0


def broker_rule_warning(summary, segments) -> str | None:
    """What a broker rule left out of the index, in one line, or None: records whose PHYSICALOFFSET field
    is not their own offset (their entries point at that field, as the broker indexes them) and entries
    skipped below a file's endPhyOffset (``buildIndex``), each with the first place it happened."""
    parts = []
    if summary.below_end_phy_offset_skipped:
        at = summary.below_end_first_offset
        seg = next((x for x in reversed(segments) if at is not None and x.base_offset <= at), None)
        where = f"{seg.name} @ byte {at - seg.base_offset} (offset {at})" if seg else f"offset {at}"
        parts.append(f"{summary.below_end_phy_offset_skipped:,} entries left out by the broker's rule that skips "
                     f"a message below its IndexFile's endPhyOffset, the first from the record at {where}")
    if summary.phy_mismatch:
        m = summary.phy_mismatch
        parts.append(f"PHYSICALOFFSET fields that are not their records' offsets, the first at {m['segment']} @ byte "
                     f"{m['segment_offset']} (its entries point where the field says, as the broker indexes them)")
    return "; ".join(parts) or None


def _time_index_arg(a) -> str | None:
    """``--time-index``: a directory, "none" (None), or unset ("auto": OUT/_timeindex)."""
    v = getattr(a, "time_index", None)
    return "auto" if v is None else None if v.lower() == "none" else v


def _spark_settings(a):
    from rocketidx.config import project_conf
    from rocketidx.spark.session import load_spark_settings
    return load_spark_settings(a.spark_conf or project_conf("spark.json"), split_bytes=getattr(a, "split_bytes", None),
                               shuffle_partitions=getattr(a, "partitions", None), master=getattr(a, "master", None))


def _build_on_spark(a, cfg, settings):
    from rocketidx.progress import spark_progress
    from rocketidx.spark.pipeline import build_index_spark
    from rocketidx.spark.session import spark_session
    stats: dict = {}
    t0 = time.monotonic()
    with spark_session(settings, sources=False) as spark, \
            spark_progress(spark, "build on Spark", enabled=not getattr(a, "json", False)):
        stats["session_s"] = round(time.monotonic() - t0, 3)
        _, summary = build_index_spark(a.commitlog, a.out, cfg, spark=spark, split_bytes=settings.split_bytes,
                                       from_offset=a.from_offset, to_offset=a.to_offset, from_time_ms=a.from_time,
                                       to_time_ms=a.to_time, shuffle_partitions=settings.shuffle_partitions,
                                       stats=stats, time_index=_time_index_arg(a), allow_empty=False)
        t_stop = time.monotonic()
    stats["stop_s"] = round(time.monotonic() - t_stop, 3)
    return summary, stats


def print_spark_figures(st: dict, wall: float) -> None:
    """What Spark did and where the time went: session start, plan, tasks, commit, stop."""
    plan = (f"{st.get('ranges')} window ranges -> {st.get('partitions')} tasks, no shuffle"
            + (f", {st['strays']:,} entries out of time order rerun in {st['rerun_tasks']} tasks" if st.get("strays") else "")
            if st.get("mode") == "direct" else f"{st.get('splits')} splits -> shuffle -> {st.get('partitions')} writers")
    print(f"spark: {plan}; peak Python worker RSS {st.get('peak_worker_rss_mb', 0):.0f} MB")
    parts = [("session start", st.get("session_s")), ("plan", st.get("plan_s")), ("job", st.get("job_s")),
             ("commit", st.get("commit_s")), ("session stop", st.get("stop_s"))]
    print("timeline: " + ", ".join(f"{k} {v:.2f}s" for k, v in parts if v is not None) + f"; whole command {wall:.2f}s"
          + f" (Python CPU in tasks {st.get('python_cpu_s', 0):.1f}s)")


def print_summary(s) -> None:
    mb = (s.bytes_scanned or s.bytes_read) / 1e6
    rate = f"{mb / s.wall_s:.0f} MB/s, {s.entries / s.wall_s / 1e6:.2f} M entries/s" if s.wall_s else ""
    print(f"segments {s.segments}  bytes {s.bytes_read:,}  messages {s.messages:,}  entries {s.entries:,}  "
          f"windows {s.windows}  files {s.files}  wall {s.wall_s:.2f}s  {rate}")
    if s.time_index is not None or (s.bytes_scanned and s.bytes_scanned < s.bytes_read):
        print(f"read {s.bytes_scanned:,} of the log's {s.bytes_read:,} bytes"
              + (f" (time index: {s.time_index})" if s.time_index else ""))
    if s.stop:
        print(f"reading stopped: {s.stop['segment']} + {s.stop['segment_offset']} "
              f"(offset {s.stop['phy_offset']}): {s.stop['reason']}")


def cmd_query(a) -> int:
    import pyarrow as pa

    from rocketidx.query import message_has_key, open_index, query_offsets, read_messages_at
    from rocketidx.units import parse_count, parse_time_ms
    if not (a.index or a.store):
        print("rocketidx query: give --index DIR or --store STORE", file=sys.stderr)
        return 2
    clash = next((why for bad, why in (
        (a.index and a.store, "--index and --store name two indexes: give one"),
        (a.queries and (a.topic or a.key), "--topic/--key and --queries exclude each other"),
        (not a.queries and not (a.topic and a.key), "give --topic T --key K, or --queries FILE"),
        (a.max < 1, f"--max must be at least 1, got {a.max}")) if bad), None)
    if clash:
        print(f"rocketidx query: {clash}", file=sys.stderr)
        return 2
    index = a.index or storage.join(a.store, "index")
    commitlog = a.commitlog or (storage.join(a.store, "commitlog") if a.store else None)
    if (a.show or a.exact) and commitlog is None:
        print("rocketidx query: --show/--exact need the CommitLog: --store STORE or --commitlog DIR", file=sys.stderr)
        return 2
    files = open_index(index, a.hash_slots, a.index_num)
    if not files:
        raise StoreLayoutError(storage.redact(index), "no IndexFiles found")
    if a.queries:
        queries = []
        with open(a.queries) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        queries.append(json.loads(line))
                    except ValueError as e:
                        raise RocketIdxError(f"{a.queries} line {n}: not JSON: {e}") from e
    elif a.topic is not None and a.key is not None:
        queries = [{"topic": a.topic, "key": a.key, "begin": a.begin, "end": a.end, "maxNum": a.max}]
    else:
        print("rocketidx query: give --topic and --key, or --queries FILE", file=sys.stderr)
        return 2
    for q in queries:
        # A line's times are spelled as the flags' are (units.parse_time_ms), ISO-8601 included.
        begin = parse_time_ms(q.get("begin", a.begin), f"{a.queries}: begin")
        end = parse_time_ms(q.get("end", a.end), f"{a.queries}: end")
        max_num = min(parse_count(q.get("maxNum", a.max), f"{a.queries}: maxNum", minimum=1),
                      L.DEFAULT_MAX_MSGS_NUM_BATCH)  # echo the cap the answer used
        offsets = query_offsets(files, q["topic"], q["key"], begin, end, max_num)
        table = None
        if a.show or a.exact:
            table, _ = read_messages_at(commitlog, offsets)
            if a.exact:
                rows = table.to_pylist()
                keep = [i for i, r in enumerate(rows) if message_has_key(r if r["topic"] is not None else None,
                                                                        q["topic"], q["key"])]
                offsets = [offsets[i] for i in keep]
                table = table.take(pa.array(keep, pa.int64()))
        if a.show:
            print_messages(q, table, as_json=a.json)
        else:
            print(json.dumps({"topic": q["topic"], "key": q["key"], "begin": begin, "end": end, "maxNum": max_num,
                              "offsets": offsets}, ensure_ascii=False))
    return 0


def _host(addr, port) -> str:
    import ipaddress
    if addr is None:
        return ""
    ip = ipaddress.ip_address(addr)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def print_messages(q: dict, table, *, as_json: bool) -> None:
    from functools import partial
    from rocketidx.units import format_utc
    rows = table.to_pylist()
    if as_json:
        for r in rows:
            r = dict(r)
            r["born_host"] = _host(r.pop("born_host"), r.pop("born_port"))
            r["store_host"] = _host(r.pop("store_host"), r.pop("store_port"))
            print(json.dumps(r, ensure_ascii=False, default=str))
        return
    print(f"{q['topic']}#{q['key']}: {len(rows)} message(s)")
    if not rows:
        return
    iso = partial(format_utc, iso=True)
    for r in rows:
        if r["topic"] is None:
            print("  (no valid message at this offset)")
            continue
        print(f"  offset {r['phy_offset']}  topic {r['topic']}  queue {r['queue_id']}@{r['queue_offset']}  "
              f"stored {iso(r['store_timestamp_ms'])}  born {iso(r['born_timestamp_ms'])}")
        print(f"    hosts born {_host(r['born_host'], r['born_port'])} store {_host(r['store_host'], r['store_port'])}"
              f"  sys_flag 0x{r['sys_flag']:X}  reconsume {r['reconsume_times']}")
        print(f"    keys {r['keys']!r}  uniq_key {r['uniq_key']!r}  tags {r['tags']!r}  body {r['body_length']} B: "
              f"{r['body_preview']!r}")
        props = (r["properties"] or "").replace("\x01", "=").replace("\x02", "; ")
        print(f"    properties {props}")


def cmd_demo(a) -> int:
    from pathlib import Path

    from rocketidx.build import build_index
    from rocketidx.config import BuildConfig
    from rocketidx.generate import GenConfig, generate_store
    from rocketidx.splits import read_segment
    from rocketidx.query import open_index, query_offsets
    from rocketidx.segments import list_segments
    root = Path(a.dir)
    store = root / "store"
    messages = DEMO_MESSAGES if a.messages is None else a.messages
    if not (store / "generator.json").exists():
        print(f"generating a sample store of {messages:,} messages in {store} ...", flush=True)
        generate_store(store, GenConfig(messages=messages, segment_bytes=64 * 1024**2, span_ms=6 * 3_600_000))
    elif a.messages is not None:
        _demo_keeps_store(store, a.messages)
    out = root / "out"
    config = BuildConfig(timezone="UTC")
    print(f"building the index of {store}/commitlog into {out} in this process ...", flush=True)
    manifest, summary = build_index(store, out, config)
    print_summary(summary)
    if not a.in_process:
        _demo_on_spark(a, store, root / "out-spark", config, summary)
    print(f"files: {', '.join(f['name'] for f in manifest['files'])}")
    first, _ = read_segment(list_segments(store)[0], end=4096)
    files = open_index(out)
    print("example queries (queryMsgByKey semantics, newest first):")
    for row in first.slice(0, 3).to_pylist():
        for key in [row["uniq_key"]] + (row["keys"] or "").split(" ")[:1]:
            if key:
                offsets = query_offsets(files, row["topic"], key)
                print(f"  {row['topic']}#{key}: {offsets}")
    return 0


def _demo_keeps_store(store, asked: int) -> None:
    """``demo --messages N`` where a sample store exists already: it is kept (a demo never deletes data);
    say so unless it holds N messages."""
    try:
        held = json.loads((store / "generator.json").read_text()).get("messages")
    except (OSError, ValueError, AttributeError):
        held = None
    if held != asked:
        holds = f"holds {held:,} messages" if isinstance(held, int) else "holds a sample store"
        print(f"rocketidx demo: --messages {asked:,} ignored: {store} already {holds} and is kept; "
              f"delete {store} to generate {asked:,}", file=sys.stderr)


def _demo_on_spark(a, store, out, config, core) -> None:
    """The same build on Spark, with what Spark costs (session start, a first job) and what it buys (the
    read and write spread over the cores), so the demo shows where each engine belongs."""
    import filecmp

    from rocketidx.engine import human_bytes
    from rocketidx.spark.pipeline import build_index_spark
    from rocketidx.spark.session import spark_session
    settings = _spark_settings(argparse.Namespace(spark_conf=None, master=a.master))
    print(f"the same build on Spark ({a.master}) into {out} ...", flush=True)
    t0 = time.monotonic()
    stats: dict = {}
    with spark_session(settings, sources=False) as spark:
        session_s = time.monotonic() - t0
        t1 = time.monotonic()
        _, summary = build_index_spark(store, out, config, spark=spark, stats=stats)
        first = time.monotonic() - t1
        t2 = time.monotonic()
        build_index_spark(store, out, config, spark=spark)
        again = time.monotonic() - t2
    same = all(filecmp.cmp(os.path.join(out, "index", n), os.path.join(store.parent, "out", "index", n), shallow=False)
               for n in os.listdir(os.path.join(out, "index")))
    mb = core.bytes_read / 1e6
    print(f"  in process:  {core.wall_s:.2f}s ({mb / core.wall_s:.0f} MB/s)")
    print(f"  on Spark:    session start {session_s:.1f}s, first build {first:.2f}s ({mb / first:.0f} MB/s), "
          f"a second build in the same session {again:.2f}s ({mb / again:.0f} MB/s); "
          f"{stats.get('partitions')} tasks, no shuffle; files {'identical' if same else 'DIFFER'}")
    print(f"  Spark's fixed cost (a JVM, Python workers) pays off from about {human_bytes(settings.break_even)} of "
          "CommitLog on this kind of machine (engine_break_even in conf/spark.json); below that `rocketidx build` "
          "picks the in-process engine by itself, and a cluster (spark-submit) always runs on Spark.")


def cmd_verify(a) -> int:
    from rocketidx.verify import BuildRead, VerifyReport, open_for_verify, verify_index
    pre = VerifyReport()
    files, manifest = open_for_verify(a.index, a.hash_slots, a.index_num, pre)
    windows = manifest.window_ms if manifest else None
    window_ids = manifest.window_ids if manifest else None
    if pre.counts:  # files that could not be opened are left out of the rest
        window_ids = None
    if a.in_process and (a.spark or _spark_flag_misused(a, "verify", "Spark (drop --in-process)",
                                                         ("master", "spark_conf", "split_bytes"))):
        if a.spark:
            print("rocketidx verify: --spark and --in-process exclude each other", file=sys.stderr)
        return 2
    rules = BuildRead.of(manifest)
    engine = _verify_engine(a, files, rules)
    if not a.json:
        print(f"engine: {engine.name} ({engine.reason})")
    if engine.spark:
        report = _verify_on_spark(a, files, windows, window_ids, rules)
    else:
        report = verify_index(files, a.commitlog, window_ms=windows, window_ids=window_ids, check_crc=not a.no_crc,
                              rules=rules)
    report.problems[:0] = pre.problems
    report.counts.update(pre.counts)
    if a.json:
        print(json.dumps(report.as_dict()))
    else:
        print_verify(report)
    return 0 if report.clean else 1


def _verify_engine(a, files, rules):
    from rocketidx.engine import choose_engine, data_bytes
    from rocketidx.segments import list_segments
    work = sum(min(storage.footprint(f.path)) for f in files)
    if a.commitlog:
        work += data_bytes(list_segments(a.commitlog))
    out_of_place = ("the build saw PHYSICALOFFSET fields that are not their records' positions: judged in one "
                    "in-process pass") if rules.fields_out_of_place and a.commitlog and not a.spark else None
    return choose_engine(work, in_process=a.in_process, master=a.master, break_even=_spark_settings(a).break_even,
                         spark_only="--spark" if a.spark else None, in_process_only=out_of_place)


def _verify_on_spark(a, files, windows, window_ids, rules):
    from rocketidx.config import project_conf
    from rocketidx.spark.session import load_spark_settings, spark_session
    from rocketidx.spark.verify import verify_index_spark
    settings = load_spark_settings(a.spark_conf or project_conf("spark.json"), split_bytes=a.split_bytes,
                                   master=a.master)
    from rocketidx.progress import spark_progress
    with spark_session(settings) as spark, spark_progress(spark, "verify on Spark", enabled=not a.json):
        return verify_index_spark(files, a.commitlog, spark=spark, window_ms=windows, window_ids=window_ids,
                                  check_crc=not a.no_crc, split_bytes=settings.split_bytes, rules=rules)


def print_verify(r) -> None:
    print(f"{'file':24} {'entries':>10} {'begin phy':>14} {'end phy':>14} {'slots used':>10} {'problems':>8}")
    for f in r.files:
        print(f"{f.name:24} {f.entries:>10,} {f.begin_phy_offset:>14} {f.end_phy_offset:>14} "
              f"{f.hash_slot_count:>10,} {f.problems:>8}")
    if r.expected_entries is not None:
        print(f"entries checked {r.entries_checked:,}; the CommitLog implies {r.expected_entries:,} over offsets "
              f"{r.covered_range[0]}..{r.covered_range[1]}")
    if r.clean:
        print("clean: no problems found")
        return
    print("problems: " + ", ".join(f"{k} {v}" for k, v in sorted(r.counts.items())))
    for p in r.problems:
        print(f"  {p.file} @ byte {p.offset}: [{p.kind}] {p.detail}")
    if r.log_mismatch:  # last, where a terminal shows it, under the problems it explains
        print(r.log_mismatch)


class _EngineBuilder:
    """The backfill's builder: when the range to rebuild is known, :func:`rocketidx.engine.choose_engine`
    picks the in-process build or the Spark one (a session is started only then)."""

    def __init__(self, a, settings):
        self.a, self.settings = a, settings
        self.engine = None
        self.spark = None

    def __call__(self, commitlog, out, config, *, start_offset=None, skip_entries=0, name_after=None):
        from rocketidx.build import build_index
        from rocketidx.engine import choose_engine, data_bytes
        from rocketidx.segments import list_segments
        segments = list_segments(commitlog, from_offset=start_offset)
        self.engine = choose_engine(data_bytes(segments, start_offset), in_process=getattr(self.a, "in_process", False),
                                    master=self.a.master, break_even=self.settings.break_even)
        if not self.engine.spark:
            return build_index(commitlog, out, config, segments=segments, start_offset=start_offset,
                               skip_entries=skip_entries, name_after=name_after)
        from rocketidx.spark.backfill import SparkBuilder
        self.spark = SparkBuilder(self.settings)
        return self.spark(commitlog, out, config, start_offset=start_offset, skip_entries=skip_entries,
                          name_after=name_after)

    def close(self) -> None:
        if self.spark is not None:
            self.spark.close()


def run_backfill_command(a: argparse.Namespace) -> int:
    """``rocketidx backfill`` and ``jobs/backfill.py``: the flags :func:`add_backfill_arguments` made -> the
    backfill (the rebuild on the engine :func:`rocketidx.engine.choose_engine` picks for its range) -> the
    plan and result on stdout."""
    from rocketidx.backfill import run_backfill
    if storage.is_remote(a.store):
        raise StoreLayoutError(storage.redact(a.store), "backfill writes into a stopped broker's local store (its "
                                                        "lock, a backup and an atomic swap need a local disk); "
                                                        "give the store's path on the broker's machine")
    in_process = getattr(a, "in_process", False)
    log = (lambda *_: None) if a.json else print
    args = dict(hash_slot_num=a.hash_slots, index_num=a.index_num, window_ms=a.window, timezone_name=a.timezone,
                dry_run=a.dry_run, check_crc=not a.no_crc, log=log)
    if in_process and _spark_flag_misused(a, "backfill", "Spark (drop --in-process)",
                                          ("master", "spark_conf", "split_bytes", "partitions")):
        return 2
    builder = _EngineBuilder(a, _spark_settings(a))
    try:
        r = run_backfill(a.store, builder=builder, **args)
    finally:
        builder.close()
    engine = builder.engine.as_dict() if builder.engine else None
    if a.json:
        print(json.dumps({"plan": r.plan.as_dict(), "installed": r.installed, "backup_dir": r.backup_dir,
                          "checkpoint_index_msg_timestamp": r.checkpoint_index_ts, "wall_s": round(r.wall_s, 3),
                          "engine": engine, "spark": (builder.spark.stats if builder.spark else None) or None}))
    elif engine:
        print(f"engine: {engine['name']} ({engine['reason']})")
    return 0


def cmd_stats(a) -> int:
    from rocketidx.stats_cli import cmd_stats as run
    return run(a)


def cmd_timeindex(a) -> int:
    from rocketidx.timeindex_cli import cmd_timeindex as run
    return run(a)


COMMANDS = {"stats": cmd_stats, "demo": cmd_demo, "verify": cmd_verify, "backfill": run_backfill_command,
            "gen": cmd_gen, "build": run_build, "query": cmd_query, "timeindex": cmd_timeindex}


# What an interrupted command leaves, in the one line it prints (rocketidx.interrupts).
INTERRUPTED_LEAVES = {"build": "the previous output is unchanged",
                "backfill": "the store's index is as it was (an install cut short is rolled back by the next run)",
                "gen": "the store may be incomplete: run gen again", "demo": "the previous output is unchanged",
                "timeindex": "files already written are whole (each is written and then renamed)"}


# Arguments that name a path or URI: a file:// URI becomes its local path here, once for every command.
PATH_ARGS = ("out", "commitlog", "index", "store", "queries", "dir", "conf", "spark_conf", "time_index")


def exit_code(prog: str, run: Callable[[], int], interrupted: str = "the previous output is unchanged") -> int:
    """The one map from how a command ended to its exit code, for ``rocketidx`` and the spark-submit jobs:
    ``run()``'s own code (0 done; 1 the input has problems: verify found some, a ``--strict`` build stopped
    early or left entries out); 2 it could not run (usage, paths, locks: any rocketidx error or OSError),
    one line on stderr; 130 interrupted (:mod:`rocketidx.interrupts`; ``interrupted``: what it leaves)."""
    try:
        return run()
    except BaseException as e:
        stop = interrupts.caught(e)  # an interrupt, or an error its unwinding set off
        if stop is not None:
            print(f"{prog}: {stop.message(interrupted)}", file=sys.stderr)
            return interrupts.EXIT_STATUS
        if isinstance(e, RocketIdxError):
            print(f"{prog}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        if isinstance(e, BrokenPipeError) and _stdout_reader_gone():
            raise  # `| head` read what it wanted: _quiet_when_the_reader_leaves ends quietly
        if isinstance(e, OSError):
            print(f"{prog}: {e}", file=sys.stderr)
            return 2
        raise


EXIT_READER_GONE = 141  # 128 + SIGPIPE: what `cat`, `grep` or `git log` end with when `| head` stops reading


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (Linux flags such a pipe's write end POLLERR), so
    that a BrokenPipeError from elsewhere (a socket, a child's pipe) is still reported as an error."""
    import select
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll(), or stdout is no file: assume it is the one
        return True


def _quiet_when_the_reader_leaves(main):
    """``rocketidx stats | head -1``: once the reader has what it wants, end quietly, no message, exit 141 as
    the coreutils do (the recipe of Python's "Note on SIGPIPE": the rest of stdout goes to /dev/null, so the
    interpreter's own flush at exit does not fail again). stdout is flushed here, inside, because output
    that still sits in the buffer would otherwise meet the closed pipe only at the interpreter's exit."""
    import functools

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        try:
            try:
                return main(argv)
            finally:
                sys.stdout.flush()
        except BrokenPipeError:
            if not _stdout_reader_gone():
                raise
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_READER_GONE
    return run


@_quiet_when_the_reader_leaves
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    storage.READS.reset()

    def run() -> int:
        for name in PATH_ARGS:
            if isinstance(getattr(args, name, None), str):
                setattr(args, name, storage.normalize(getattr(args, name)))
        return COMMANDS[args.command](args)
    try:
        return exit_code(f"rocketidx {args.command}", run, INTERRUPTED_LEAVES.get(args.command, "nothing was changed"))
    finally:
        if args.verbose and storage.READS.requests:
            print(f"rocketidx {args.command}: read {storage.READS.bytes:,} bytes from remote storage in "
                  f"{storage.READS.requests:,} requests", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
