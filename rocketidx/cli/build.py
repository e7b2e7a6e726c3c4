"""``rocketidx build`` and ``jobs/nightly_rebuild.py``: flags -> a :class:`rocketidx.config.BuildRequest` ->
:func:`rocketidx.ops.build.build` -> the summary and warnings, as text or JSON."""
from __future__ import annotations

import argparse
import json
import sys

from rocketidx.cli.common import BROKER_VERSION_HELP, add_engine_arguments, spark_flag_misused
from rocketidx.config import BuildConfig
from rocketidx.units import count_arg, duration_arg, size_arg, time_arg


def add_build_arguments(b: argparse.ArgumentParser, *, conf: str | None = None, spark_conf: str | None = None,
                        engine_flag: bool = True) -> None:
    """The build's flags, for ``rocketidx build`` and ``jobs/nightly_rebuild.py`` alike (``conf``/``spark_conf``:
    their defaults; ``engine_flag``: offer ``--in-process``, which a spark-submit job does not)."""
    b.add_argument("--commitlog", required=True,
                   help="CommitLog directory, or a store holding commitlog/ (a path or a URI: s3://, hdfs://...)")
    b.add_argument("--out", required=True, help="output directory (a path or a URI); OUT/index, OUT/_manifest.json")
    b.add_argument("--hash-slots", type=count_arg("--hash-slots", 1), default=None,
                   help=f"default {BuildConfig.hash_slot_num}")
    b.add_argument("--index-num", type=count_arg("--index-num", 1), default=None, help=f"default {BuildConfig.index_num}")
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
    b.add_argument("--full", action="store_true",
                   help="read the whole log (default: an output holding a build of the same log with the same "
                        "settings is brought up to date from the bytes that changed)")
    b.add_argument("--strict", action="store_true",
                   help="exit 1 when reading stopped early (an invalid record or a zero tail before the end) "
                        "or a broker rule left entries out (PHYSICALOFFSET fields that are not their records' "
                        "offsets, messages below an IndexFile's endPhyOffset)")
    add_engine_arguments(b, "build", spark_conf, engine_flag)
    if engine_flag:
        b.add_argument("--workers", type=count_arg("--workers", 1), default=None,
                       help="processes an in-process build reads and writes with, each a share of the windows "
                            "(default: one per core from 256 MiB to read, else 1: one pass in this process)")
    b.add_argument("--from-offset", type=count_arg("--from-offset"), default=None,
                   help="first CommitLog offset to index")
    b.add_argument("--to-offset", type=count_arg("--to-offset"), default=None,
                   help="index messages starting before this offset")
    b.add_argument("--from-time", type=time_arg("--from-time"), default=None,
                   help="epoch ms or ISO-8601 store time (inclusive)")
    b.add_argument("--to-time", type=time_arg("--to-time"), default=None,
                   help="epoch ms or ISO-8601 store time (exclusive)")
    b.add_argument("--targets", default=None,
                   help="what to build: index, consumequeue, or index,consumequeue (one read of the CommitLog "
                        "feeds both, as the broker's dispatch does; default index)")
    b.add_argument("--cq-file-size", type=size_arg("--cq-file-size"), default=None,
                   help="ConsumeQueue file size (6000000, 1m...), rounded up to a multiple of 20 as the broker does "
                        f"(default {BuildConfig.cq_file_size}: mappedFileSizeConsumeQueue)")
    b.add_argument("--broker-conf", default=None,
                   help="the properties file the broker was started with (mqbroker -c FILE): its messageDelayLevel, "
                        "mappedFileSizeConsumeQueue, maxHashSlotNum and maxIndexNum are used; flags win")
    b.add_argument("--broker-version", default=None, help=BROKER_VERSION_HELP)
    b.add_argument("--topic-config", default=None,
                   help="the broker's topic table (STORE/config/topics.json): its queue.type=BatchCQ topics get "
                        "batch consume queues (OUT/batchconsumequeue) instead of ConsumeQueues; in process, whole log")
    b.add_argument("--time-index", default=None,
                   help="time index directory: a --from/--to-time build reads only the blocks it needs, a whole "
                        "read keeps it up to date (default OUT/_timeindex for a local OUT; 'none': neither)")


def run_build(a: argparse.Namespace) -> int:
    """``rocketidx build``: the flags :func:`add_build_arguments` made -> a
    :class:`rocketidx.config.BuildRequest` -> :func:`rocketidx.ops.build.build` -> the summary on stdout."""
    from rocketidx.config import build_request
    request = build_request(a.commitlog, a.out, conf=a.conf, broker_conf=a.broker_conf,
                            broker_version=a.broker_version, hash_slot_num=a.hash_slots, index_num=a.index_num,
                            cq_file_size=a.cq_file_size, window_ms=a.window, timezone=a.timezone,
                            check_crc=False if a.no_crc else None, targets=a.targets, from_offset=a.from_offset,
                            to_offset=a.to_offset, from_time_ms=a.from_time, to_time_ms=a.to_time,
                            time_index=a.time_index, overwrite=a.overwrite, strict=a.strict,
                            in_process=a.in_process, master=a.master, spark_conf=a.spark_conf,
                            split_bytes=a.split_bytes, partitions=a.partitions, topic_config=a.topic_config,
                            workers=getattr(a, "workers", None), full=a.full)
    if a.in_process and spark_flag_misused(a, "build", "Spark (drop --in-process)",
                                            ("spark_conf", "split_bytes", "partitions")):
        return 2
    if a.master and spark_flag_misused(a, "build", "the in-process engine (drop --master)", ("workers",)):
        return 2
    return report_build(request, as_json=a.json)


def report_build(request, *, as_json: bool) -> int:
    """Run the build ``request`` asks for, with a progress line on a terminal (not with ``as_json``), print
    its summary (text or one JSON object) and any warning; the exit code (1: ``strict`` and something was
    left out)."""
    from rocketidx.cli.progress import CommandProgress
    from rocketidx.ops.build import build
    result = build(request, CommandProgress("build", enabled=not as_json))
    summary, cfg, engine = result.summary, request.config, result.engine
    if as_json:
        print(json.dumps(dict(summary.as_dict(), engine=engine.as_dict(), process_wall_s=round(result.wall_s, 3),
                              driver_peak_rss_mb=result.driver_peak_rss_mb, spark=result.spark,
                              unread_bytes=result.unread_bytes, unread_segments=result.unread_segments,
                              settings_from=dict(request.settings_from), index_rules=request.release.rules)))
    else:
        print_summary(summary, cfg.targets, result.unread_bytes)
        if request.broker_conf:
            print("settings: " + ", ".join(f"{k} {getattr(cfg, k)!r} from {v}"
                                           for k, v in request.settings_from.items()))
        print(f"engine: {engine.name} ({engine.reason})")
        if cfg.index:
            print(f"index rules: {request.release.rules}")
        if result.spark:
            print_spark_figures(result.spark, result.wall_s)
        warning = reader_warning(summary.reader, engine.spark)
        if warning:
            print(warning)
    return 1 if _warn_left_out(request.strict, result) and request.strict else 0


def _warn_left_out(strict: bool, result) -> bool:
    """Warn on stderr about what the index leaves out (reading stopped early, a broker rule); whether any."""
    warned = False
    summary = result.summary
    if result.unread_bytes:
        st = summary.stop
        print(f"rocketidx build: warning: reading stopped early at {st['segment']} @ byte {st['segment_offset']} "
              f"(offset {st['phy_offset']}): {st['reason']}; {result.unread_bytes:,} bytes in "
              f"{result.unread_segments} later segment(s) left unread, as the broker's recovery would"
              + ("" if strict else " (--strict makes this exit 1)"), file=sys.stderr)
        if strict:
            return True  # --strict stops at the first problem, as before
        warned = True
    left_out = broker_rule_warning(summary, result.segments)
    if left_out:
        print("rocketidx build: warning: " + left_out + ("" if strict else " (--strict makes this exit 1)"),
              file=sys.stderr)
        warned = True
    return warned


def reader_warning(reader: str | None, on_spark: bool) -> str | None:
    """The summary's one line when a read ran without the compiled kernel (about 5x slower), with the fix."""
    if reader not in ("numpy", "mixed"):
        return None
    who = ("every task" if reader == "numpy" else "some tasks") if on_spark else "this process"
    fix = ("ship the environment archive `make dist` builds (spark-submit --archives "
           "dist/rocketidx-env.tar.gz#env --conf spark.pyspark.python=./env/bin/python; docs/spark.md)"
           if on_spark else "reinstall rocketidx where a C compiler and the zlib headers are (pip install .)")
    return f"warning: {who} read the CommitLog with the numpy reader, not the compiled kernel (about 5x slower): {fix}"


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


def print_summary(s, targets: tuple[str, ...] = ("index",), unread_bytes: int = 0) -> None:
    """The build's summary in a few lines: the counters of what it built (``targets``: a queue-only build
    has no IndexFile counters to show), the bytes read, and where reading ended (``unread_bytes``: what an
    early stop left, :func:`rocketidx.build.summary.unread`)."""
    mb = (s.bytes_scanned or s.bytes_read) / 1e6
    cq = s.consumequeue
    index = "index" in targets or not cq
    entries, what = (s.entries, "entries") if index else (cq["entries"], "queue entries")
    rate = f"{mb / s.wall_s:.0f} MB/s, {entries / s.wall_s / 1e6:.2f} M {what}/s" if s.wall_s else ""
    counters = f"entries {s.entries:,}  windows {s.windows}  files {s.files}  " if index else ""
    print(f"segments {s.segments}  bytes {s.bytes_read:,}  messages {s.messages:,}  {counters}"
          f"wall {s.wall_s:.2f}s  {rate}")
    if s.time_index is not None or (s.bytes_scanned and s.bytes_scanned < s.bytes_read):
        print(f"read {s.bytes_scanned:,} of these {s.bytes_read:,} bytes"
              + (f" (time index: {s.time_index})" if s.time_index else ""))
    if cq:
        print(f"consumequeues: {len(cq['queues'])} queues, {cq['files']} files of {cq['file_size']:,} bytes, "
              f"{cq['entries']:,} entries" + (f"; dropped by the broker's rules: {cq['dropped']}"
                                                if any(cq["dropped"].values()) else ""))
    if s.stop:
        print(reading_ended(s.stop, unread_bytes))
    said = incremental_line(s.incremental)
    if said:
        print(said)


def incremental_line(inc: dict | None) -> str | None:
    """What an incremental build reused and read, or why a build of an earlier output was a full one."""
    if not inc:
        return None
    if "full" in inc:
        return f"built in full: {inc['full']}"
    parts = [f"incremental: {inc['why']}"]
    if inc["why"] != "nothing changed":
        parts.append(f"read {inc['bytes_read']:,} bytes from offset {inc['read_from']:,}")
    parts.append(f"index files carried {inc['files_carried']}, written {inc['files_written']}")
    if inc.get("windows_rebuilt") or inc.get("windows_dropped"):
        parts.append(f"windows rebuilt {inc['windows_rebuilt']}, dropped {inc['windows_dropped']}")
    if inc.get("queue_files_carried") or inc.get("queue_files_written"):
        parts.append(f"queue files carried {inc['queue_files_carried']}, written {inc['queue_files_written']}")
    if inc.get("copied"):
        parts.append(f"{inc['copied']} carried by copying (the filesystem refused hard links)")
    return "; ".join(parts)


def reading_ended(stop: dict, unread_bytes: int) -> str:
    """Where reading ended, in words: the end of the log (the newest segment's zero tail, its last record,
    or a blank record padding it: the normal end), the end of an offset range, or an early stop, which
    leaves bytes unread as the broker's recovery would (and a warning on stderr says so)."""
    where = f"{stop['segment']} + {stop['segment_offset']} (offset {stop['phy_offset']})"
    if stop["kind"] == "range_end":
        return f"read to the end of the range: its last record ends at {where}"
    if stop["kind"] == "corrupt" or unread_bytes:
        return f"reading stopped early at {where}: {stop['reason']}"
    return f"read to the end of the log at {where}: {stop['reason']}"


def add_parser(sub) -> None:
    add_build_arguments(sub.add_parser(
        "build", help="build the index of a CommitLog into OUT/index and OUT/_manifest.json",
        description="Build the broker's IndexFiles of a CommitLog into OUT/index, with OUT/_manifest.json, and "
                    "commit them atomically. Runs in this process (on --workers) or on Spark, the same bytes either "
                    "way: in process unless --master or spark-submit says Spark (a local Spark session does not "
                    "beat the workers at any size), or a URI output is too large to stage in local scratch space."))
