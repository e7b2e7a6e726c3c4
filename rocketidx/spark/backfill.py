"""Backfill on Spark: :func:`rocketidx.backfill.index.run_backfill` with the Spark build as its builder.

In: a stopped broker's store and the Spark settings (``conf/spark.json`` and flags). Out: what
``run_backfill`` returns. The plan, the lock, the staging, the verification and the install are the
core's (:mod:`rocketidx.backfill.index`); only the rebuild of the lost range runs on Spark. The session is
created when the rebuild starts, not before: a dry run, a locked store or a store with nothing to do
never starts a JVM.
"""
from __future__ import annotations

import os

class SparkBuilder:
    """A ``build_index``-shaped callable that runs :func:`build_index_spark` in a lazily made session."""

    def __init__(self, settings, spark=None):
        self.settings = settings
        self.spark = spark
        self._own = spark is None
        self.stats: dict = {}

    def __call__(self, commitlog, out, config, *, start_offset=None, skip_entries=0, name_after=None,
                 time_index="auto"):
        from rocketidx.spark.build import build_index_spark
        if self.spark is None:
            from pyspark.sql import SparkSession

            from rocketidx.spark.session import get_session
            # Only a session made here is stopped by close(): an active one (a notebook's, a test's, a command
            # run inside another process) is left running, as spark_session leaves it.
            self._own = SparkSession.getActiveSession() is None
            self.spark = get_session(self.settings.master, self.settings.conf, sources=False)
        return build_index_spark(commitlog, out, config, spark=self.spark, split_bytes=self.settings.split_bytes,
                                 shuffle_partitions=self.settings.shuffle_partitions, stats=self.stats,
                                 start_offset=start_offset, skip_entries=skip_entries, name_after=name_after,
                                 time_index=time_index)

    def close(self) -> None:
        if self._own and self.spark is not None:
            from rocketidx.spark.session import stop_session
            stop_session(self.spark)
            self.spark = None


def run_backfill_spark(store: str | os.PathLike, *, spark=None, spark_conf: str | os.PathLike | None = None,
                       master: str | None = None, split_bytes: int | None = None, partitions: int | None = None,
                       **backfill_args):
    """``run_backfill`` with the rebuild on Spark; ``backfill_args`` are ``run_backfill``'s.

    Returns ``(BackfillResult, spark figures)``; a session this call made is stopped before it returns.
    """
    from rocketidx.backfill.index import run_backfill
    from rocketidx.config import project_conf
    from rocketidx.spark.session import load_spark_settings
    conf = spark_conf or project_conf("spark.json")
    settings = load_spark_settings(conf, split_bytes=split_bytes, shuffle_partitions=partitions, master=master)
    builder = SparkBuilder(settings, spark)
    try:
        result = run_backfill(store, builder=builder, **backfill_args)
    finally:
        builder.close()
    return result, builder.stats
