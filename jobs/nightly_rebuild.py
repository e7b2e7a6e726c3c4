"""Nightly rebuild of a RocketMQ store's message-key index on Spark.

In: a store (or CommitLog) directory and an output directory; index settings from ``conf/defaults.json``
(``--conf``), Spark settings and the split size from ``conf/spark.json`` (``--spark-conf``), flags win.
Out: ``OUT/index/``, ``OUT/_manifest.json``, ``OUT/_SUCCESS`` swapped in atomically; the summary on
stdout. Exit code 0 done, 1 the build failed on its input, 2 it could not run (arguments, paths, lock).

    # package rocketidx's Python sources once (executors import them from the zip)
    python -c "from rocketidx.spark.session import build_py_files; build_py_files('dist')"

    spark-submit --master yarn --deploy-mode client \\
        --py-files dist/rocketidx.zip \\
        --conf spark.pyspark.python=/opt/rocketidx-env/bin/python \\
        jobs/nightly_rebuild.py --commitlog /data/rocketmq/store --out /mnt/shared/rocketidx \\
        [--conf conf/defaults.json] [--spark-conf conf/spark.json] [--window 1h] [--timezone Asia/Shanghai] \\
        [--split-bytes 128m] [--partitions N] [--from-offset N] [--to-offset N] [--from-time T] [--to-time T]

Executors need numpy, pyarrow and pandas (``spark.pyspark.python`` pointing at an environment that has
them, or a packed one shipped with ``--archives env.tar.gz#env``). The output is a path every executor
and the driver see (a shared mount), or a URI pyarrow.fs opens (``hdfs://``, ``s3://``): tasks then build
each file on their local disk and upload it, and the commit writes ``OUT/CURRENT``.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def _default(name: str) -> str | None:
    p = CONF_DIR / name
    return str(p) if p.exists() else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from rocketidx.cli import _duration, _positive_int, _size
    p = argparse.ArgumentParser(prog="nightly_rebuild", description=__doc__.split("\n")[0])
    p.add_argument("--commitlog", required=True, help="store directory (with commitlog/) or CommitLog directory")
    p.add_argument("--out", required=True, help="output: a path driver and executors share, or a URI (hdfs://, s3://)")
    p.add_argument("--conf", default=_default("defaults.json"), help="index settings (JSON, section index)")
    p.add_argument("--spark-conf", default=_default("spark.json"), help="Spark settings and split size (JSON)")
    p.add_argument("--master", default=None, help="only when not launched by spark-submit (default local[*])")
    p.add_argument("--hash-slots", type=_positive_int, default=None)
    p.add_argument("--index-num", type=_positive_int, default=None)
    p.add_argument("--window", type=_duration("window"), default=None)
    p.add_argument("--timezone", default=None)
    p.add_argument("--no-crc", action="store_true")
    p.add_argument("--split-bytes", type=_size, default=None)
    p.add_argument("--partitions", type=_positive_int, default=None, help="writer partitions (default: cores)")
    p.add_argument("--from-offset", type=_positive_int, default=None)
    p.add_argument("--to-offset", type=_positive_int, default=None)
    p.add_argument("--from-time", default=None, help="epoch ms or ISO-8601 store time (inclusive)")
    p.add_argument("--to-time", default=None, help="epoch ms or ISO-8601 store time (exclusive)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * min(a.verbose, 2), format="%(levelname)s %(name)s: %(message)s")
    from rocketidx.cli import print_summary
    from rocketidx.config import load_config
    from rocketidx.errors import ConfigError, RocketIdxError, StoreLayoutError, StoreLockedError
    from rocketidx.spark.pipeline import build_index_spark
    from rocketidx.spark.session import get_session, load_spark_settings
    from rocketidx.spark.source import parse_time_ms
    try:
        config = load_config(a.conf, hash_slot_num=a.hash_slots, index_num=a.index_num, window_ms=a.window,
                             timezone=a.timezone, check_crc=False if a.no_crc else None)
        settings = load_spark_settings(a.spark_conf, split_bytes=a.split_bytes, shuffle_partitions=a.partitions,
                                       master=a.master)
        from_time = parse_time_ms(a.from_time, "from_time") if a.from_time else None
        to_time = parse_time_ms(a.to_time, "to_time") if a.to_time else None
        spark = get_session(settings.master, settings.conf)
        stats: dict = {}
        try:
            _, summary = build_index_spark(
                a.commitlog, a.out, config, spark=spark, split_bytes=settings.split_bytes,
                from_offset=a.from_offset, to_offset=a.to_offset, from_time_ms=from_time, to_time_ms=to_time,
                shuffle_partitions=settings.shuffle_partitions, stats=stats)
        finally:
            spark.stop()  # before exit: a cluster would otherwise see its executors vanish mid-shutdown
    except (ConfigError, StoreLayoutError, StoreLockedError) as e:
        print(f"nightly_rebuild: {e}", file=sys.stderr)
        return 2
    except RocketIdxError as e:
        print(f"nightly_rebuild: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(dict(summary.as_dict(), spark=stats)))
    else:
        print_summary(summary)
        print(f"spark: {stats['splits']} splits, {stats['partitions']} writer partitions, "
              f"peak Python worker RSS {stats['peak_worker_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
