"""Statistics: :func:`stats` takes a :class:`rocketidx.config.StatsRequest` and returns a :class:`StatsResult`;
:func:`index_stats` is the library's form (``rocketidx.index_stats``), which returns the engine's own object.

In: an index (a build output or a broker's ``store/index``) and optionally its CommitLog, or a ConsumeQueue
directory. Out: the summary and the tables (files, chains, hot keys, topics, sizing ...), or one row per
queue, and the engine that computed them.

Stays true: what can be checked without Spark is checked first (a JVM takes seconds to start): the sizing
targets, the files, and that the CommitLog is the index's own (another log's topics and keys would make
every CommitLog table wrong); the tables are the same whichever engine computed them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from rocketidx.build.engine import Engine, data_bytes
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import EngineRequest, StatsRequest, engine_request
from rocketidx.ops.engine import engine_for
import rocketidx.storage as storage
from rocketidx.stats.queues import QUEUE_COLUMNS  # noqa: F401  (the order a queue row's columns are shown in)

__all__ = ["StatsRequest", "StatsResult", "stats", "index_stats", "QUEUE_COLUMNS"]

# A command's statistics session: no UI, no console progress (its tables are what it prints).
QUIET_SPARK = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}


@dataclass(frozen=True)
class StatsResult:
    """The summary and tables (name -> pandas DataFrame) of an index, with the engine that computed them;
    for a build output that committed no IndexFile, its summary alone (``empty_build``, no engine); for
    ConsumeQueues, the summary and one row per queue (``queues``), computed here (no engine)."""

    summary: dict
    tables: dict = field(default_factory=dict)
    engine: Engine | None = None
    empty_build: bool = False
    queues: list[dict] | None = None


def stats(request: StatsRequest, progress=None) -> StatsResult:
    """The statistics ``request`` asks for: ConsumeQueues' (``consumequeue``) or an index's."""
    if request.consumequeue:
        from rocketidx.output.open import consumequeue_dir
        from rocketidx.stats.queues import queue_stats
        summary, rows = queue_stats(consumequeue_dir(request.consumequeue), request.commitlog)
        return StatsResult(summary, queues=rows)
    from rocketidx.stats.core import file_refs
    from rocketidx.stats.sizing import SizingTargets
    r = request
    targets = SizingTargets(r.target_chain, r.target_files_per_day, r.headroom)
    refs, manifest = file_refs(r.index, r.hash_slot_num, r.index_num)
    if not refs and manifest is not None:
        # A build output that committed no IndexFile (its log held no indexable message): an index with
        # nothing in it, as verify and query see it, not an error.
        return StatsResult({"index": storage.redact(r.index), "files": 0, "entries": 0,
                            "messages": manifest.header.get("messages"), "hash_slot_num": manifest.hash_slot_num,
                            "index_num": manifest.index_num}, empty_build=True)
    if r.commitlog:
        from rocketidx.query.logmatch import require_index_of_log
        require_index_of_log(r.index, r.commitlog, r.hash_slot_num, r.index_num, check_crc=r.check_crc)
    engine = _engine(r.engine, r.index, r.commitlog, r.hash_slot_num, r.index_num)
    kw = dict(hash_slot_num=r.hash_slot_num, index_num=r.index_num, bucket_ms=r.bucket_ms, top=r.top,
              targets=targets, check_crc=r.check_crc, check_log=False)
    if engine.spark:
        from rocketidx.spark.session import get_session
        from rocketidx.spark.stats import index_stats as on_spark
        computed = on_spark(get_session(master=r.engine.master, conf=QUIET_SPARK, log_level="ERROR"), r.index,
                            r.commitlog, **kw)
    else:
        from rocketidx.stats.in_process import index_stats_local
        computed = index_stats_local(r.index, r.commitlog, **kw)
    tables = computed.to_pandas()
    summary = computed.summary()
    computed.unpersist()
    return StatsResult(summary, tables, engine)


def _engine(request: EngineRequest, index, commitlog, hash_slot_num, index_num) -> Engine:
    """The engine for the bytes a statistics pass reads: the index's allocated bytes and the CommitLog's."""
    from rocketidx.stats.in_process import index_bytes
    work = index_bytes(index, hash_slot_num, index_num)
    if commitlog:
        work += data_bytes(list_segments(commitlog))
    return engine_for(request, work)


def index_stats(index_dir: str | os.PathLike, commitlog: str | os.PathLike | None = None, *, spark=None,
                master: str | None = None, in_process: bool = False, spark_conf: str | os.PathLike | None = None,
                **options):
    """Statistics of the index in ``index_dir`` (and of its keys in ``commitlog``), on the engine the
    command line would pick: ``spark`` (a session) or ``master`` runs on Spark, ``in_process=True`` here,
    and otherwise the bytes to read against the break-even in ``conf/spark.json``. ``options``: as
    :func:`rocketidx.stats.in_process.index_stats_local` takes them. Returns the statistics object of the engine
    that ran (``.summary()``, ``.to_pandas()``; the same tables either way).
    """
    if spark is None:
        engine = _engine(engine_request(in_process=in_process, master=master, spark_conf=spark_conf), index_dir,
                         commitlog, options.get("hash_slot_num"), options.get("index_num"))
        if not engine.spark:
            from rocketidx.stats.in_process import index_stats_local
            return index_stats_local(index_dir, commitlog, **options)
        from rocketidx.spark.session import get_session
        spark = get_session(master=master)
    from rocketidx.spark.stats import index_stats as on_spark
    return on_spark(spark, index_dir, commitlog, **options)
