"""rocketidx on Spark: the only package that imports pyspark.

* :mod:`rocketidx.spark.source`   the ``rocketmq-commitlog`` data source (messages, entries, stops of
  byte-range splits) and :func:`read_messages`, the broker-recovery view of the messages;
* :mod:`rocketidx.spark.pipeline` :func:`build_index_spark`, the Spark build (same bytes as the core's);
* :mod:`rocketidx.spark.writer`   the mapInArrow IndexFile writer;
* :mod:`rocketidx.spark.session`  :func:`get_session`, settings from ``conf/spark.json``.
"""
from rocketidx.spark.pipeline import build_index_spark
from rocketidx.spark.session import SparkSettings, get_session, load_spark_settings
from rocketidx.spark.source import SOURCE_NAME, CommitLogDataSource, read_messages, register

__all__ = ["SOURCE_NAME", "CommitLogDataSource", "SparkSettings", "build_index_spark", "get_session",
           "load_spark_settings", "read_messages", "register"]
