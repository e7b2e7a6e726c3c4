"""The build: :func:`build` takes a :class:`rocketidx.config.BuildRequest` and returns a :class:`BuildResult`.

In: the request (what to read, where to write, the files' settings, the range, the time index, the engine
flags). Out: the committed output (``OUT/index``, ``OUT/_manifest.json``, with ConsumeQueues
``OUT/consumequeue``) and what happened (the summary, the engine and why, what reading left unread).

Stays true: nothing is read or created before the range and the output are known to be safe (an output in
a broker's store, or a build of another kind over an earlier one without ``overwrite``, is refused); the
engine is chosen here, from the bytes the build will read; every plan, in process or on Spark, whole or a
range, ends in :func:`rocketidx.build.finish.finish_build`, so the files do not depend on the engine.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass

from rocketidx.build.engine import IN_PROCESS, Engine, data_bytes
from rocketidx.build.pool import available_cores, default_workers
from rocketidx.build.summary import BuildSummary, unread
from rocketidx.commitlog.entries import index_rules
from rocketidx.commitlog.segments import Segment, commitlog_dir, list_segments
from rocketidx.config import BuildRequest
from rocketidx.errors import ConfigError, RocketIdxError
from rocketidx.ops.engine import engine_for
from rocketidx.ops.progress import SILENT, Progress
from rocketidx.output import safety
import rocketidx.storage as storage
from rocketidx.process_cost import peak_rss_kb

__all__ = ["BuildRequest", "BuildResult", "build"]


@dataclass(frozen=True)
class BuildResult:
    """What a build did: the manifest committed, the summary, the engine that ran it and why, the segments
    it listed, the wall time of the build itself, what an early stop left unread (bytes, segments), Spark's
    figures when it ran there, and this process's peak memory."""

    manifest: dict
    summary: BuildSummary
    engine: Engine
    segments: tuple[Segment, ...]
    wall_s: float
    unread_bytes: int
    unread_segments: int
    spark: dict | None
    driver_peak_rss_mb: float


def build(request: BuildRequest, progress: Progress | None = None) -> BuildResult:
    """Build what ``request`` asks for, on the engine its flags and size choose, and commit it, under the
    broker release's index rules (the operation holds them itself: a job has no command line's main to)."""
    with index_rules(request.release.tag_entries):
        return _build(request, progress)


def _build(request: BuildRequest, progress: Progress | None) -> BuildResult:
    progress = progress or SILENT
    r, cfg = request, request.config
    # Before anything is read or created (not even the output's lock): the range, then where the output goes.
    safety.check_range(r.from_offset, r.to_offset, r.from_time_ms, r.to_time_ms)
    safety.check_output_dir(r.out)
    if r.time_index_given:
        safety.check_time_index_dir(r.time_index)
    segments = list_segments(r.commitlog, from_offset=r.from_offset, to_offset=r.to_offset)
    safety.check_replace(r.out, safety.BuildKind(commitlog_dir(r.commitlog), r.filters, cfg.window_ms,
                                                 cfg.hash_slot_num, cfg.index_num, cfg.targets,
                                                 cfg.queue_file_size if cfg.consumequeue else None), r.overwrite)
    if r.filters or storage.is_remote(r.out):
        cfg.refuse_batch_queues("a range" if r.filters else "a remote output")
    incremental_why = None
    if not r.full:
        done, incremental_why = _incremental(r, segments, progress)
        if done is not None:
            return done
    work = _work_bytes(r, segments)
    workers = r.engine.workers or default_workers(work)
    engine = engine_for(r.engine, work, in_process_only="batch consume queues (--topic-config) are built in process "
                                                        "for now" if cfg.batch_queues else None,
                        spark_only=_staging_past_disk(r.out, work), workers=workers)
    if engine.spark and (r.engine.workers or 1) > 1:
        raise ConfigError("--workers", r.engine.workers, f"workers are the in-process engine's, and Spark runs this "
                                                         f"build ({engine.reason}); add --in-process")
    t0 = time.monotonic()
    spark_stats = None
    if engine.spark:
        manifest, summary, spark_stats = _build_on_spark(r, progress)
    elif r.filters:
        from rocketidx.build.in_process import build_index_range
        manifest, summary = build_index_range(r.commitlog, r.out, cfg, from_offset=r.from_offset, to_offset=r.to_offset,
                                       from_time_ms=r.from_time_ms, to_time_ms=r.to_time_ms,
                                       time_index=r.time_index, allow_empty=False, workers=workers)
    else:
        from rocketidx.build.in_process import build_index
        with progress.reading(work) as hook:
            manifest, summary = build_index(r.commitlog, r.out, cfg, segments=segments, time_index=r.time_index,
                                     progress=hook, workers=workers)
    wall = time.monotonic() - t0
    if incremental_why:
        summary.incremental = {"full": incremental_why}
    left_bytes, left_segments = unread(segments, summary.stop)
    return BuildResult(manifest, summary, engine, tuple(segments), wall, left_bytes, left_segments, spark_stats,
                       round(peak_rss_kb() / 1024, 1))


def _incremental(r: BuildRequest, segments, progress: Progress) -> tuple[BuildResult | None, str | None]:
    """The output brought up to date from what changed in the log (:mod:`rocketidx.build.incremental`), in this
    process: (its result, None); or (None, why a full build), None when the output holds no earlier build."""
    from rocketidx.build import incremental
    from rocketidx.output.manifest import Manifest
    remote = storage.is_remote(r.out)
    try:
        previous = None if remote or not os.path.isdir(r.out) else Manifest.read(r.out)
    except RocketIdxError as e:
        return None, f"the output's manifest cannot be read ({e})"
    if previous is None and not remote:
        return None, None
    change, why = incremental.plan(previous, r.config, segments, filters=r.filters, remote_out=remote)
    if change is None:
        return None, why
    t0 = time.monotonic()
    work = max(0, change.log_end - change.read_from)
    try:
        with progress.reading(work) as hook:
            manifest, summary = incremental.build_incremental(r.commitlog, r.out, r.config, segments=segments,
                                                              time_index=r.time_index, progress=hook,
                                                              threads=r.engine.workers or available_cores())
    except incremental.FullBuild as e:
        return None, str(e)
    engine = Engine(IN_PROCESS, "an incremental build reads what changed, in this process")
    left_bytes, left_segments = unread(segments, summary.stop)
    return BuildResult(manifest, summary, engine, tuple(segments), time.monotonic() - t0, left_bytes, left_segments,
                       None, round(peak_rss_kb() / 1024, 1)), None


def _staging_past_disk(out: str, work_bytes: int) -> str | None:
    """Why an in-process build cannot hold this output on this machine, or None: an in-process build of a URI
    output stages the whole output in local scratch space first (rocketidx.output.target.built_here), and the
    bytes to read stand for what it may need there (an index is smaller than its log); Spark's tasks upload
    their files as they go."""
    if not storage.is_remote(out):
        return None
    from rocketidx.output.target import scratch_dir
    from rocketidx.units import human_bytes
    free = shutil.disk_usage(scratch_dir()).free
    if free >= work_bytes:
        return None
    return (f"the output is a URI, which an in-process build stages in {scratch_dir()} first: {human_bytes(free)} "
            f"free there, {human_bytes(work_bytes)} to read")


def _work_bytes(r: BuildRequest, segments) -> int:
    """The bytes the build will read: the range's, or a time slice's when the time index can tell."""
    work = data_bytes(segments, r.from_offset, r.to_offset)
    if (r.from_time_ms is not None or r.to_time_ms is not None) and r.from_offset is None and r.to_offset is None:
        from rocketidx.commitlog.timeindex import plan_slice
        sliced = plan_slice(segments, r.time_index, r.from_time_ms, r.to_time_ms, r.config.check_crc)[0] \
            if r.time_index and segments and not storage.is_remote(r.commitlog) else None
        work = sliced.bytes if sliced else work  # what the slice will read
    return work


def _build_on_spark(r: BuildRequest, progress: Progress) -> tuple[dict, BuildSummary, dict]:
    from rocketidx.spark.build import build_index_spark
    from rocketidx.spark.session import spark_session
    settings = r.engine.settings
    stats: dict = {}
    t0 = time.monotonic()
    with spark_session(settings, sources=False) as spark, progress.on_spark(spark):
        stats["session_s"] = round(time.monotonic() - t0, 3)
        manifest, summary = build_index_spark(r.commitlog, r.out, r.config, spark=spark, split_bytes=settings.split_bytes,
                                       from_offset=r.from_offset, to_offset=r.to_offset, from_time_ms=r.from_time_ms,
                                       to_time_ms=r.to_time_ms, shuffle_partitions=settings.shuffle_partitions,
                                       stats=stats, time_index=r.time_index, allow_empty=False)
        t_stop = time.monotonic()
    stats["stop_s"] = round(time.monotonic() - t_stop, 3)
    return manifest, summary, stats
