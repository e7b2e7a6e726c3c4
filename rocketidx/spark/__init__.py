"""rocketidx on Spark: the only package that imports pyspark.

* :mod:`rocketidx.spark.sources.commitlog`   the ``rocketmq-commitlog`` data source (messages, entries, stops of
  byte-range splits) and :func:`read_messages`, the broker-recovery view of the messages;
* :mod:`rocketidx.spark.build` :func:`build_index_spark`, the Spark build (same bytes as the core's);
* :mod:`rocketidx.spark.writer`   the mapInArrow IndexFile writer;
* :mod:`rocketidx.spark.session`  :func:`get_session`, settings from ``conf/spark.json``;
* :mod:`rocketidx.spark.verify`   :func:`verify_index_spark`, the index check on Spark;
* :mod:`rocketidx.spark.backfill` :func:`run_backfill_spark`, the crash backfill with its rebuild on Spark.

Names are imported on first use: Spark's planner processes unpickle the data source, and importing
this package must not drag the whole build (and its compile time) into each of them.
"""
from __future__ import annotations

from importlib import import_module

# Each name and the module under rocketidx.spark that defines it (tests/unit/test_public_api.py resolves them all).
_WHERE = {
    "build_index_spark": "build",
    "SparkSettings": "session", "get_session": "session", "load_spark_settings": "session",
    "SOURCE_NAME": "sources.commitlog", "CommitLogDataSource": "sources.commitlog",
    "read_messages": "sources.commitlog", "register": "sources.commitlog",
    "verify_index_spark": "verify", "run_backfill_spark": "backfill",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f"rocketidx.spark.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'rocketidx.spark' has no attribute {name!r}")
