"""The Spark build: CommitLog -> committed index output, with the same bytes as the in-process build.

In: a CommitLog (or store) directory, an output directory (a local path, or a URI pyarrow.fs opens), a
:class:`BuildConfig`, a SparkSession (or one is made), and optional offset/time filters. Out:
``OUT/index/<files>``, ``OUT/_manifest.json``, ``OUT/_SUCCESS`` (for a URI, the same under the version
``OUT/CURRENT`` names: see :mod:`rocketidx.output.local`), and ``(manifest, BuildSummary)`` exactly as
:func:`rocketidx.build.in_process.build_index` returns them.

The plan (one Spark job, two stages)::

    rocketmq-commitlog source, output=shuffle        splits of split_bytes; key hashes computed here;
                                                     one bundle row per window per decoded batch
      -> repartition(n, window's partition key)      a window lives in exactly one partition; every
                                                     split's info row is copied to every partition
      -> sortWithinPartitions(window, phy_offset)    bundles of a window hold disjoint offset ranges,
                                                     and entries inside a bundle are in entry order
      -> mapInArrow(write_partition)                 IndexFiles into attempt-unique task directories
      -> collect the task results (files, windows, splits) to the driver
    driver: resolve the stops, validate, move the files into the version directory, output.commit

Stays true: the files and the manifest equal the in-process build's for any split size and any
number of partitions; only small task results reach the driver; a failed or killed job leaves the
previous output as it was (``output.commit`` swaps ``OUT/current``, or writes ``OUT/CURRENT``, only after
everything is in place), and ``OUT/.lock`` keeps two builds of the same output apart.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import fields, replace
from functools import partial

from rocketidx.build.direct_task import WriterParams, collect_blocks, plan_tasks, run_direct
from rocketidx.build.finish import finish_build, keep_task_time_index
from rocketidx.build.results import WRITER_ROWS, TaskResult, from_rows, ranges_of
from rocketidx.build.summary import BuildSummary
from rocketidx.commitlog.dispatch import delay_levels_ms
from rocketidx.commitlog.segments import list_segments
from rocketidx.commitlog.splits import DEFAULT_SPLIT_BYTES, SplitSpec, plan_splits, resolve_stops
from rocketidx.commitlog.timeindex import AUTO
from rocketidx.config import BuildConfig, time_index_dir
from rocketidx.errors import ConfigError, RocketIdxError
import rocketidx.interrupts as interrupts
from rocketidx.output.local import LocalOutput, Staging
from rocketidx.output.local import TASKS_DIR
from rocketidx.output.remote import RemoteOutput
from rocketidx.output.target import open_output
from rocketidx.spark.sources.commitlog import SOURCE_NAME, SourceOptions, register
from rocketidx.spark.tasks import typed_task_errors
from rocketidx.spark.writer import write_partition
import rocketidx.storage as storage

log = logging.getLogger(__name__)


# --- partitioning -------------------------------------------------------------------------------

def _murmur3_long(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of a bigint (``Murmur3_x86_32.hashLong``), as a signed 32-bit int."""
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    h = seed & m
    for k in (value & m, (value >> 32) & m):
        k = (k * 0xCC9E2D51) & m
        k = rotl(k, 15)
        k = (k * 0x1B873593) & m
        h ^= k
        h = rotl(h, 13)
        h = (h * 5 + 0xE6546B64) & m
    h ^= 8
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def partition_keys(n: int) -> list[int]:
    """For each partition p < n a bigint whose Spark hash partitioning lands in p.

    Windows go round-robin (``window mod n``), which balances consecutive windows far better than
    hashing the window id itself: 24 hourly windows on 2 partitions hash to 12±2.5 each. Correctness
    does not depend on this mapping, only balance: entries and info copies go through the same keys.
    """
    keys: dict[int, int] = {}
    k = 0
    while len(keys) < n:
        keys.setdefault(_murmur3_long(k) % n, k)
        k += 1
    return [keys[p] for p in range(n)]


def entries_frame(spark, opts: SourceOptions):
    """The entry stage: ``spark.read.format("rocketmq-commitlog")`` with ``output=shuffle``."""
    register(spark)
    return spark.read.format(SOURCE_NAME).options(**replace(opts, output="shuffle").as_options()).load()


def partition_entries(entries, n: int):
    """The window stage: each window in exactly one of ``n`` partitions, info copies to each, sorted by
    ``(window nulls first, phy_offset)`` so every writer sees the info rows first."""
    from pyspark.sql import functions as F
    keys = F.array(*[F.lit(k).cast("long") for k in partition_keys(n)])
    # Info rows carry their copy number in phy_offset: copy c goes where window c (mod n) goes.
    slot = F.pmod(F.coalesce(F.col("window"), F.col("phy_offset")), F.lit(n)).cast("int")
    return (entries.repartition(n, F.element_at(keys, slot + 1))
            .sortWithinPartitions(F.col("window").asc_nulls_first(), "phy_offset"))


# --- the build ------------------------------------------------------------------------------------

def build_index_spark(commitlog: str | os.PathLike, out: str | os.PathLike, config: BuildConfig = BuildConfig(), *,
                      spark=None, master: str | None = None, split_bytes: int = DEFAULT_SPLIT_BYTES,
                      from_offset: int | None = None, to_offset: int | None = None,
                      from_time_ms: int | None = None, to_time_ms: int | None = None,
                      shuffle_partitions: int | None = None, stats: dict | None = None,
                      start_offset: int | None = None, skip_entries: int = 0, name_after: str | None = None,
                      shuffle: bool = False, time_index: str | None = AUTO,
                      allow_empty: bool = True) -> tuple[dict, BuildSummary]:
    """Build and commit the index of a CommitLog on Spark. Returns (manifest, summary) like ``build_index``.

    ``start_offset``, ``skip_entries``, ``name_after``: as in ``build_index`` (a backfill's range; the
    entries of the first message already indexed; the name every new file must sort after).
    ``start_offset`` is ``from_offset`` under the core's name (give one or the other).

    ``spark``: a session to use (else one is joined or created, ``master`` default ``local[*]``);
    ``shuffle_partitions``: writer partitions (default: the session's default parallelism);
    ``stats``: a dict to fill with Spark-side figures (mode, tasks, partitions, peak worker RSS, job time);
    ``shuffle``: always use the shuffle plan (else it runs only where the direct plan cannot: a remote
    CommitLog, a log too far out of time order, a read that stops early; see :func:`_run_direct`);
    ``time_index``: the time index directory a time slice reads and a whole read keeps (see
    :func:`rocketidx.config.time_index_dir`; only the direct plan uses it); ``allow_empty``: as
    :func:`rocketidx.build.finish.finish_build`.
    """
    t0 = time.monotonic()
    config.refuse_batch_queues("on Spark")
    # Resolved here, on the driver: executors read and write in working directories of their own.
    commitlog, out = storage.resolve(commitlog), storage.resolve(out)
    output = open_output(out)
    from_offset = _checked(from_offset, start_offset, split_bytes, shuffle_partitions)
    segments = list_segments(commitlog, from_offset=from_offset, to_offset=to_offset)
    if spark is None:
        from rocketidx.spark.session import get_session
        spark = get_session(master=master)
    n = shuffle_partitions or spark.sparkContext.defaultParallelism
    # Pin the end: a live broker may add a segment between this listing and the source's own.
    end = to_offset if to_offset is not None else (segments[-1].end_offset if segments else 0)
    opts = SourceOptions(path=commitlog, output="shuffle", from_offset=from_offset, to_offset=end,
                         from_time_ms=from_time_ms, to_time_ms=to_time_ms, check_crc=config.check_crc,
                         split_bytes=split_bytes, batch_records=config.batch_records,
                         window_ms=config.window_ms, stop_replicas=n, skip_entries=skip_entries)
    summary = BuildSummary(segments=len(segments))
    filters = {"from_offset": from_offset, "to_offset": to_offset, "from_time_ms": from_time_ms,
               "to_time_ms": to_time_ms, "skip_entries": skip_entries or None}
    tdir = time_index_dir(time_index, out)
    with output.lock():
        staging = output.new_staging()
        try:
            t_job = time.monotonic()
            plan_figures: dict = {}
            ran, mode, blocks, queues = _run_targets(spark, opts, output, staging, config, segments, n, shuffle,
                                                     shuffle_partitions, tdir, plan_figures)
            results, resolved, splits = ran
            t_job = time.monotonic() - t_job
            t_commit = time.monotonic()
            manifest = finish_build(output, staging, results, resolved, config, segments, summary, filters=filters,
                                    name_after=name_after, t0=t0, allow_empty=allow_empty,
                                    queues=None if queues is None else queues.manifest)
            t_commit = time.monotonic() - t_commit
        except BaseException as e:
            if interrupts.caught(e) is not None:  # tasks may still be writing into the staged version
                from rocketidx.spark.session import settle
                settle(spark)
            output.discard(staging)
            raise
        if mode == "shuffle" and plan_figures.get("time_index", "").endswith("blocks"):
            plan_figures["time_index"] = "not used: the direct plan gave way to the shuffle plan, which reads all"
        summary.time_index = plan_figures.get("time_index")
        keep_task_time_index(tdir, segments, results, blocks if mode == "direct" else 0, summary, config.check_crc)
    figures = _figures(mode, results, splits, n, plan_figures, t_job, t_commit)
    if queues is not None:
        figures["consumequeue"] = _queue_figures(queues) | {
            "read": "with the index (direct plan)" if config.index and mode == "direct" else "its own"}
        figures["peak_worker_rss_mb"] = max(figures["peak_worker_rss_mb"], figures["consumequeue"]["peak_worker_rss_mb"])
    if stats is not None:
        stats.update(figures)
    log.info("spark build: %s, %d files in %.2fs", figures, summary.files, summary.wall_s)
    return manifest, summary


def _run_targets(spark, opts: SourceOptions, output, staging: Staging, config: BuildConfig, segments, n: int,
                 shuffle: bool, shuffle_partitions: int | None, tdir: str | None, plan_figures: dict):
    """Run the jobs the targets need: ``((results, resolved, splits), mode, block_bytes, queues)``. The index
    by the direct plan where it can (its tasks then dispatch the queues too: one read), else the shuffle plan;
    the queues by :func:`queues_on_spark` when no direct task read for them."""
    ran, blocks, mode = None, 0, "queues"
    if config.index:
        if not shuffle and segments and not any(storage.is_remote(s.path) for s in segments):
            # Probing needs random access: a remote CommitLog goes by the shuffle plan.
            ran, blocks = _try_direct(spark, opts, output, staging, config, segments, shuffle_partitions, tdir,
                                      plan_figures)
        mode = "shuffle" if ran is None else "direct"
        if ran is None:
            ran = _run(spark, opts, output, staging, config, n, segments)
    queues = None
    if config.consumequeue and mode == "direct":
        from rocketidx.build.queues import place_queues
        results, resolved, _ = ran
        queues = place_queues(segments, [q for r in results for q in r.queue_reads], ranges_of(results), resolved,
                              config.queue_file_size, staging.uri, run_writes=partial(_queue_job, spark, _queue_writes),
                              write_tasks=n)
    elif config.consumequeue:
        queues = queues_on_spark(spark, segments, opts, config.queue_file_size, delay_levels_ms(config.delay_levels),
                                 staging.uri, n, light_queues=config.light_queues)
        if ran is None:
            ran = [TaskResult(0, "", ranges=queues.infos)], queues.resolved, queues.splits
    return ran, mode, blocks, queues


def _checked(from_offset: int | None, start_offset: int | None, split_bytes: int,
             shuffle_partitions: int | None) -> int | None:
    """The read's first offset, after refusing arguments that cannot work together."""
    if start_offset is not None:
        if from_offset is not None and from_offset != start_offset:
            raise ConfigError("start_offset", start_offset, f"differs from from_offset {from_offset}")
        from_offset = start_offset
    if split_bytes <= 0:
        raise ConfigError("split_bytes", split_bytes, "must be positive")
    if shuffle_partitions is not None and shuffle_partitions < 1:
        raise ConfigError("shuffle_partitions", shuffle_partitions, "must be positive")
    return from_offset


def _try_direct(spark, opts: SourceOptions, output, staging: Staging, config: BuildConfig, segments,
                shuffle_partitions: int | None, tdir: str | None, plan_figures: dict):
    """The direct plan, when it can give the in-process bytes: ``((results, resolved, pieces), block_bytes)``,
    or ``(None, 0)`` after removing what its tasks wrote, when the shuffle plan must run instead."""
    plan = plan_tasks(segments, opts, config.window_ms, shuffle_partitions, spark.sparkContext.defaultParallelism,
                      plan_figures, time_index=tdir)
    blocks = collect_blocks(tdir, segments, opts, plan)
    params = WriterParams(staging.uri, config.hash_slot_num, config.index_num, config.window_ms, time_blocks=blocks,
                          queue_delays=delay_levels_ms(config.delay_levels) if config.consumequeue else None,
                          queue_light=config.light_queues)
    if not plan.tasks:
        # No record starts in the read; a time index may show that without reading (no record in the slice).
        return (([], resolve_stops(plan.skipped), 0), blocks) if plan.skipped else (None, 0)
    ran = run_direct(plan, segments, partial(_direct_job, spark, opts=opts, params=params), plan_figures)
    if ran is None:
        output.remove(f"{staging.path}/{TASKS_DIR}")
        return None, 0
    return ran, blocks


def _figures(mode: str, results: list[TaskResult], splits: int, n: int, plan_figures: dict, t_job: float,
             t_commit: float) -> dict:
    """What Spark did, for ``--json`` and the summary: the plan, job and commit time, peak worker memory, CPU."""
    infos = ranges_of(results)
    rss = [i.worker_rss_kb for i in infos] + [r.worker_rss_kb for r in results]
    read_cpu = sum(i.cpu_ms for i in infos) / 1000
    return {"mode": mode, "splits": splits, "partitions": plan_figures["tasks"] if mode == "direct" else n,
            **(plan_figures if mode == "direct" else {k: v for k, v in plan_figures.items() if k == "time_index"}),
            "job_s": round(t_job, 3), "commit_s": round(t_commit, 3),
            "peak_worker_rss_mb": round(max(rss, default=0) / 1024, 1),
            "python_read_cpu_s": round(read_cpu, 2),
            "python_cpu_s": round(sum(r.cpu_ms for r in results) / 1000 + (read_cpu if mode == "shuffle" else 0), 2)}


# --- the ConsumeQueues: splits read in parallel, runs placed here, files written in parallel ------------

def queues_on_spark(spark, segments, spec: SplitSpec, file_size: int, delays_ms: tuple[int, ...], staging: str,
                    n: int, sync: bool = True, light_queues=None):
    """:func:`rocketidx.build.queues.build_queues` with Spark running the reads (a task per split) and the
    writes (``n`` tasks). ``staging`` must be a directory every executor sees (local masters: any)."""
    from rocketidx.build.queues import build_queues
    spec = SplitSpec(**{f.name: getattr(spec, f.name) for f in fields(SplitSpec)})
    return build_queues(segments, spec, file_size, delays_ms, staging,
                        run_reads=partial(_queue_job, spark, _queue_reads),
                        run_writes=partial(_queue_job, spark, _queue_writes), write_tasks=n, sync=sync,
                        light_queues=light_queues)


def _queue_job(spark, task, items, *args):
    sc = spark.sparkContext
    sc.setJobDescription(f"rocketidx build (consumequeue {task.__name__.strip('_')}): {len(items)} tasks")
    try:
        with typed_task_errors():
            return sc.parallelize(items, len(items)).mapPartitions(partial(task, args=args)).collect()
    finally:
        sc.setJobDescription(None)


def _queue_reads(splits, args):
    from pyspark import TaskContext

    from rocketidx.build.queues import read_task
    from rocketidx.spark.tasks import task_setup
    task_setup()
    ctx = TaskContext.get()
    for split in splits:
        yield read_task(split, *args, attempt=ctx.taskAttemptId() if ctx else 0)


def _queue_writes(groups, args):
    from rocketidx.build.queues import write_task
    from rocketidx.spark.tasks import task_setup
    task_setup()
    for group in groups:
        yield write_task(group, *args)


def _queue_figures(queues) -> dict:
    rss = [r.worker_rss_kb for r in queues.reads] + [w["worker_rss_kb"] for w in queues.writes]
    return {"splits": queues.splits, "write_tasks": len(queues.writes),
            "peak_worker_rss_mb": round(max(rss, default=0) / 1024, 1),
            "python_cpu_s": round((sum(r.cpu_ms for r in queues.reads) + sum(w["cpu_ms"] for w in queues.writes))
                                  / 1000, 2)}


def _direct_job(spark, tasks, what: str, *, opts: SourceOptions, params: WriterParams, **kw) -> list[TaskResult]:
    """The direct plan's ``run_job`` on Spark: one partition per task, results collected (small)."""
    sc = spark.sparkContext
    sc.setJobDescription(f"rocketidx build ({what}): {len(tasks)} tasks -> {params.staging}")
    try:
        return sc.parallelize(tasks, len(tasks)).mapPartitions(partial(_direct_partition, opts=opts, params=params,
                                                                         **kw)).collect()
    finally:
        sc.setJobDescription(None)


def _direct_partition(tasks, opts: SourceOptions, params: WriterParams, report_ranges: bool = True):
    from pyspark import TaskContext

    from rocketidx.build.direct_task import run_task, task_dir_name
    from rocketidx.spark.tasks import task_setup
    task_setup()
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx else 0
    attempt = ctx.taskAttemptId() if ctx else 0
    for task in tasks:
        yield run_task(task, opts, params, task_dir_name(task, attempt), partition, report_ranges=report_ranges)


def _run(spark, opts: SourceOptions, output: LocalOutput | RemoteOutput, staging: Staging, config: BuildConfig,
         n: int, segments):
    """Run the job; when splits disagree on where records start, once more with those segments whole.

    ``staging``: the version directory on ``output`` (the tasks get its ``uri``).
    """
    location = staging.uri
    for _ in range(2):
        parts = plan_splits(segments, opts)
        if not parts:
            return [], resolve_stops([]), 0
        params = WriterParams(location, config.hash_slot_num, config.index_num, config.window_ms, len(parts))
        df = partition_entries(entries_frame(spark, opts), n).mapInArrow(
            partial(write_partition, params=params), _spark_schema(WRITER_ROWS))
        spark.sparkContext.setJobDescription(f"rocketidx build: {len(parts)} splits -> {n} writers -> {location}")
        try:
            results = from_rows([r.asDict() for r in _collect_bounded(spark, df)])
        finally:
            spark.sparkContext.setJobDescription(None)
        infos = ranges_of(results)
        if len({i.index for i in infos}) != len(parts):
            raise RocketIdxError(f"the writers returned {len({i.index for i in infos})} of {len(parts)} split "
                                 "infos; is an AQE or shuffle setting merging the info copies?")
        resolved = resolve_stops(infos)
        if not resolved.chain_breaks:
            return results, resolved, len(parts)
        log.info("splits disagree on where records start (%s); rereading those segments as one split",
                 "; ".join(map(str, resolved.chain_breaks)))
        output.remove(f"{staging.path}/{TASKS_DIR}")
        opts = replace(opts, whole_segments=resolved.whole_segments(opts.whole_segments))
    raise RocketIdxError(f"split chain still broken after rereading whole segments: {resolved.chain_breaks}")


# A bundle holds up to batch_records messages (~2 MB at the defaults): the writer's Arrow batches are
# cut by bytes, not only by rows, so a task holds a few bundles at a time, never a whole window.
WRITER_BATCH_BYTES = 64 * 1024**2


def _collect_bounded(spark, df):
    key = "spark.sql.execution.arrow.maxBytesPerBatch"
    before = spark.conf.get(key, None)
    spark.conf.set(key, str(WRITER_BATCH_BYTES))
    try:
        return df.collect()
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def _spark_schema(schema):
    from pyspark.sql.pandas.types import from_arrow_schema
    return from_arrow_schema(schema)
