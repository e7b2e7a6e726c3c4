"""``rocketidx build`` and ``jobs/nightly_rebuild.py``: flags -> engine -> build -> summary."""
from __future__ import annotations

import argparse
import json
import sys
import time

from rocketidx.cli.common import BROKER_VERSION_HELP, add_engine_arguments, spark_flag_misused, spark_settings
from rocketidx.config import broker_release
from rocketidx.errors import ConfigError
import rocketidx.layout as L
import rocketidx.storage as storage
from rocketidx.units import count_arg, duration_arg, size_arg, time_arg


def add_build_arguments(b: argparse.ArgumentParser, *, conf: str | None = None, spark_conf: str | None = None,
                        engine_flag: bool = True) -> None:
    """The build's flags, for ``rocketidx build`` and ``jobs/nightly_rebuild.py`` alike (``conf``/``spark_conf``:
    their defaults; ``engine_flag``: offer ``--in-process``, which a spark-submit job does not)."""
    b.add_argument("--commitlog", required=True,
                   help="CommitLog directory, or a store holding commitlog/ (a path or a URI: s3://, hdfs://...)")
    b.add_argument("--out", required=True, help="output directory (a path or a URI); OUT/index, OUT/_manifest.json")
    b.add_argument("--hash-slots", type=count_arg("--hash-slots", 1), default=None,
                   help=f"default {L.DEFAULT_HASH_SLOT_NUM}")
    b.add_argument("--index-num", type=count_arg("--index-num", 1), default=None, help=f"default {L.DEFAULT_INDEX_NUM}")
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
    add_engine_arguments(b, "build", spark_conf, engine_flag)
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
                        f"(default {L.DEFAULT_CQ_FILE_SIZE}: mappedFileSizeConsumeQueue)")
    b.add_argument("--broker-conf", default=None,
                   help="the properties file the broker was started with (mqbroker -c FILE): its messageDelayLevel, "
                        "mappedFileSizeConsumeQueue, maxHashSlotNum and maxIndexNum are used; flags win")
    b.add_argument("--broker-version", default=None, help=BROKER_VERSION_HELP)
    b.add_argument("--time-index", default=None,
                   help="time index directory: a --from/--to-time build reads only the blocks it needs, a whole "
                        "read keeps it up to date (default OUT/_timeindex for a local OUT; 'none': neither)")


def run_build(a: argparse.Namespace) -> int:
    """``rocketidx build`` and ``jobs/nightly_rebuild.py``: the flags :func:`add_build_arguments` made ->
    the engine (:func:`rocketidx.build.engine.choose_engine`) -> the build -> the summary on stdout."""
    from rocketidx.build.engine import choose_engine
    from rocketidx.commitlog.segments import list_segments
    from rocketidx.output import safety
    from rocketidx.commitlog.segments import commitlog_dir
    in_process = getattr(a, "in_process", False)
    # Before anything is read or created (not even the output's lock): the range, then where the output goes.
    safety.check_range(a.from_offset, a.to_offset, a.from_time, a.to_time)
    safety.check_output_dir(a.out)
    if _time_index_arg(a) not in (None, "auto"):
        safety.check_time_index_dir(a.time_index)
    cfg, settings_from = build_config(a)
    if in_process and spark_flag_misused(a, "build", "Spark (drop --in-process)",
                                          ("spark_conf", "split_bytes", "partitions")):
        return 2
    settings = spark_settings(a)
    segments = list_segments(a.commitlog, from_offset=a.from_offset, to_offset=a.to_offset)
    filters = {k: v for k, v in (("from_offset", a.from_offset), ("to_offset", a.to_offset),
                                 ("from_time_ms", a.from_time), ("to_time_ms", a.to_time)) if v is not None}
    filtered = bool(filters)
    safety.check_replace(a.out, safety.BuildKind(commitlog_dir(a.commitlog), filters, cfg.window_ms,
                                                 cfg.hash_slot_num, cfg.index_num, cfg.targets,
                                                 cfg.queue_file_size if cfg.consumequeue else None),
                         getattr(a, "overwrite", False))
    tindex = _time_index_arg(a)
    work = _work_bytes(a, segments, cfg, tindex)
    engine = choose_engine(work, in_process=in_process, master=a.master, break_even=settings.break_even)
    t0 = time.monotonic()
    spark_stats = None
    if engine.spark:
        summary, spark_stats = _build_on_spark(a, cfg, settings)
    elif filtered:
        from rocketidx.build.local import build_index_range
        _, summary = build_index_range(a.commitlog, a.out, cfg, from_offset=a.from_offset, to_offset=a.to_offset,
                                       from_time_ms=a.from_time, to_time_ms=a.to_time, time_index=tindex,
                                       allow_empty=False)
    else:
        from rocketidx.build.local import build_index
        from rocketidx.cli.progress import ProgressLine
        with ProgressLine("build", enabled=not a.json) as line:
            _, summary = build_index(a.commitlog, a.out, cfg, segments=segments, time_index=tindex,
                                     progress=line.reader(work))
    wall = time.monotonic() - t0
    from rocketidx.build.summary import unread
    left_bytes, left_segments = unread(segments, summary.stop)
    if a.json:
        from rocketidx.usage import peak_rss_kb
        rss_mb = round(peak_rss_kb() / 1024, 1)
        print(json.dumps(dict(summary.as_dict(), engine=engine.as_dict(), process_wall_s=round(wall, 3),
                              driver_peak_rss_mb=rss_mb, spark=spark_stats, unread_bytes=left_bytes,
                              unread_segments=left_segments, settings_from=settings_from,
                              index_rules=broker_release(getattr(a, "broker_version", None)).rules)))
    else:
        print_summary(summary, cfg.targets, left_bytes)
        if getattr(a, "broker_conf", None):
            print("settings: " + ", ".join(f"{k} {getattr(cfg, k)!r} from {v}" for k, v in settings_from.items()))
        print(f"engine: {engine.name} ({engine.reason})")
        if cfg.index:
            print(f"index rules: {broker_release(getattr(a, 'broker_version', None)).rules}")
        if spark_stats:
            print_spark_figures(spark_stats, wall)
        warning = reader_warning(summary.reader, engine.spark)
        if warning:
            print(warning)
    return 1 if _warn_left_out(a, summary, segments, left_bytes, left_segments) and a.strict else 0


def build_config(a) -> tuple:
    """The build's settings and where each came from: a flag, else the broker's properties file
    (``--broker-conf``), else ``--conf``, else the default."""
    from rocketidx.config import BuildConfig, broker_settings, conf_settings, load_config
    broker = broker_settings(a.broker_conf) if getattr(a, "broker_conf", None) else {}
    flags = {"hash_slot_num": a.hash_slots, "index_num": a.index_num, "cq_file_size": getattr(a, "cq_file_size", None)}
    from_broker = {"hash_slot_num": broker.get("maxHashSlotNum"), "index_num": broker.get("maxIndexNum"),
                   "cq_file_size": broker.get("mappedFileSizeConsumeQueue"),
                   "delay_levels": broker.get("messageDelayLevel")}
    chosen = {k: flags.get(k) if flags.get(k) is not None else from_broker[k] for k in from_broker}
    try:
        cfg = load_config(a.conf, window_ms=a.window, timezone=a.timezone, check_crc=False if a.no_crc else None,
                          targets=getattr(a, "targets", None), **chosen)
    except ConfigError as e:
        raise as_given(e, a, flags, from_broker) from None
    conf = conf_settings(a.conf)
    said = {k: "flag" if flags.get(k) is not None else "broker-conf" if from_broker[k] is not None
            else "conf" if conf.get(k, getattr(BuildConfig(), k)) != getattr(BuildConfig(), k) else "default"
            for k in from_broker}
    return cfg, said


# The sizes' names where a user gives them: the flag, and the key of the broker's properties file.
SIZE_FLAGS = {"hash_slot_num": ("--hash-slots", "maxHashSlotNum"), "index_num": ("--index-num", "maxIndexNum"),
              "cq_file_size": ("--cq-file-size", "mappedFileSizeConsumeQueue")}


def as_given(e: ConfigError, a, flags: dict, from_broker: dict) -> ConfigError:
    """A settings error in the words the user gave them: ``--hash-slots`` rather than ``hash_slot_num``,
    the --broker-conf key or the --conf setting a value came from, and a default said to be one (a flag
    that makes an IndexFile too large used to be blamed on ``index_num``, a flag not given)."""
    from rocketidx.config import BuildConfig, conf_settings
    fields = str(e.option).split(", ")
    if not set(fields) <= set(SIZE_FLAGS):
        return e
    values = e.value if len(fields) > 1 else (e.value,)

    def named(field: str) -> tuple[str, bool]:
        """(where the value came from, as an option, e.g. ``--broker-conf maxHashSlotNum``; a default?)"""
        flag, key = SIZE_FLAGS[field]
        if flags.get(field) is not None:
            return flag, False
        if from_broker.get(field) is not None:
            return f"--broker-conf {key}", False
        if conf_settings(a.conf).get(field, getattr(BuildConfig(), field)) != getattr(BuildConfig(), field):
            return f"--conf {field}", False
        return flag, True
    given = sorted(zip(fields, values), key=lambda fv: named(fv[0])[1])  # what the user gave first
    others = ", ".join(f"{named(f)[0]} {v}" + (" (the default)" if named(f)[1] else "") for f, v in given[1:])
    return ConfigError(named(given[0][0])[0], given[0][1], (f"with {others}, " if others else "") + e.reason)


def _work_bytes(a, segments, cfg, tindex) -> int:
    """The bytes the build will read: the range's, or a time slice's when the time index can tell."""
    from rocketidx.build.engine import data_bytes
    work = data_bytes(segments, a.from_offset, a.to_offset)
    if (a.from_time is not None or a.to_time is not None) and a.from_offset is None and a.to_offset is None:
        from rocketidx.build.finish import time_index_dir
        from rocketidx.commitlog.timeindex import plan_slice
        tdir = time_index_dir(tindex, a.out)
        sliced = plan_slice(segments, tdir, a.from_time, a.to_time, cfg.check_crc)[0] if tdir and segments \
            and not storage.is_remote(a.commitlog) else None
        work = sliced.bytes if sliced else work  # what the slice will read
    return work


def _warn_left_out(a, summary, segments, left_bytes: int, left_segments: int) -> bool:
    """Warn on stderr about what the index leaves out (reading stopped early, a broker rule); whether any."""
    warned = False
    if left_bytes:
        st = summary.stop
        print(f"rocketidx build: warning: reading stopped early at {st['segment']} @ byte {st['segment_offset']} "
              f"(offset {st['phy_offset']}): {st['reason']}; {left_bytes:,} bytes in {left_segments} later "
              "segment(s) left unread, as the broker's recovery would" + ("" if a.strict else
                                                                           " (--strict makes this exit 1)"),
              file=sys.stderr)
        if a.strict:
            return True  # --strict stops at the first problem, as before
        warned = True
    left_out = broker_rule_warning(summary, segments)
    if left_out:
        print("rocketidx build: warning: " + left_out + ("" if a.strict else " (--strict makes this exit 1)"),
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


def _time_index_arg(a) -> str | None:
    """``--time-index``: a directory, "none" (None), or unset ("auto": OUT/_timeindex)."""
    v = getattr(a, "time_index", None)
    return "auto" if v is None else None if v.lower() == "none" else v


def _build_on_spark(a, cfg, settings):
    from rocketidx.cli.progress import spark_progress
    from rocketidx.spark.build import build_index_spark
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
                    "commit them atomically. Runs in this process or on Spark, the same bytes either way: the engine "
                    "is chosen by the bytes to read (engine_break_even in conf/spark.json) unless --in-process or "
                    "--master says which."))
