"""Submitted to the standalone cluster by tests/spark/test_cluster.py: what each executor imports, printed as one
JSON line (the executors' ``rocketidx.__file__``, their reader, their working directory)."""
import json
import sys

from pyspark.sql import SparkSession


def probe(_):
    import os

    import rocketidx
    from rocketidx.commitlog.native import reader_name
    yield {"file": rocketidx.__file__, "reader": reader_name(), "cwd": os.getcwd(), "python": sys.executable}


if __name__ == "__main__":
    spark = SparkSession.builder.getOrCreate()
    rows = spark.sparkContext.parallelize(range(4), 4).mapPartitions(probe).collect()
    print("PROBE " + json.dumps(rows))
    spark.stop()
