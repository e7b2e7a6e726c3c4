"""rocketidx: rebuild, look up, verify and inspect Apache RocketMQ's IndexFiles from CommitLog segments.

What notebooks and scripts use::

    from rocketidx import build_index, open_index, verify_index, index_stats

    manifest, summary = build_index("store/commitlog", "out")   # in this process
    files = open_index("out")                                   # oldest first
    report = verify_index(files, "store/commitlog")             # .clean, .problems
    stats = index_stats("out", "store/commitlog")               # in process or on Spark, by size

Each name is loaded on first use, so ``import rocketidx`` stays cheap and never loads pyspark; the
Spark engine is imported only when ``index_stats`` picks it. The package's folders follow the data:
``commitlog/`` (segments -> records -> entries) -> ``index/`` (windows -> IndexFiles) -> ``output/``
(versioned, atomically committed) -> ``build/``; then ``query/``, ``verify/``, ``stats/``, ``backfill/``,
``spark/`` and ``cli/`` (docs/internals.md).
"""
from __future__ import annotations

import os
from importlib import import_module

__all__ = ["build_index", "open_index", "verify_index", "index_stats", "BuildConfig", "RocketIdxError"]

_LAZY = {
    "build_index": "rocketidx.build.local",
    "open_index": "rocketidx.query.lookup",
    "verify_index": "rocketidx.verify.core",
    "BuildConfig": "rocketidx.config",
    "RocketIdxError": "rocketidx.errors",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rocketidx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def index_stats(index_dir: str | os.PathLike, commitlog: str | os.PathLike | None = None, *, spark=None,
                master: str | None = None, in_process: bool = False, spark_conf: str | os.PathLike | None = None,
                **options):
    """Statistics of the index in ``index_dir`` (and of its keys in ``commitlog``), on the engine the
    command line would pick: ``spark`` (a session) or ``master`` runs on Spark, ``in_process=True`` here,
    and otherwise the bytes to read against the break-even in ``conf/spark.json``. ``options``: as
    :func:`rocketidx.stats.local.index_stats_local` takes them. Returns the statistics object of the engine
    that ran (``.summary()``, ``.to_pandas()``; the same tables either way).
    """
    from rocketidx.build.engine import choose_engine, data_bytes
    from rocketidx.commitlog.segments import list_segments
    from rocketidx.config import project_conf
    from rocketidx.spark.session import load_spark_settings
    from rocketidx.stats.local import index_bytes, index_stats_local

    if spark is None:
        settings = load_spark_settings(spark_conf or project_conf("spark.json"), master=master)
        work = index_bytes(index_dir, options.get("hash_slot_num"), options.get("index_num"))
        if commitlog is not None:
            work += data_bytes(list_segments(commitlog))
        if not choose_engine(work, in_process=in_process, master=master, break_even=settings.break_even).spark:
            return index_stats_local(index_dir, commitlog, **options)
        from rocketidx.spark.session import get_session
        spark = get_session(master=master)
    from rocketidx.spark.stats import index_stats as on_spark
    return on_spark(spark, index_dir, commitlog, **options)
