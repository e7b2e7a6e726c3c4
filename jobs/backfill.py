"""Crash backfill of a stopped RocketMQ broker's message-key index, on Spark.

In: the broker's store directory (``commitlog/``, ``index/``, ``checkpoint``, ``abort``, ``lock``), which
the driver must see as a local or mounted path, since it takes the broker's lock and installs files
there. Spark settings and the split size come from ``conf/spark.json`` (``--spark-conf``), flags win.
Out: the plan on stdout; unless ``--dry-run``, the lost range rebuilt on Spark, verified, and installed
file by file (replaced files and the old checkpoint moved to ``STORE/index.backup/<time>/``), then the
checkpoint's indexMsgTimestamp updated. Exit code 0 done (or nothing to do), 1 the rebuild failed on
its input or did not verify, 2 it could not run (arguments, paths, a running broker holding the lock).

    python -c "from rocketidx.spark.session import build_py_files; build_py_files('dist')"

    spark-submit --master yarn --deploy-mode client \\
        --py-files dist/rocketidx.zip \\
        --conf spark.pyspark.python=/opt/rocketidx-env/bin/python \\
        jobs/backfill.py --store /data/rocketmq/store [--dry-run] [--hash-slots N --index-num N] \\
        [--window 0] [--timezone Asia/Shanghai] [--split-bytes 128m] [--partitions N] [--json]

Executors read the CommitLog and write the new files into ``STORE/index.rocketidx-staging``: with
executors on other hosts, the store must be a mount they share with the driver.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # the checkout's, beside this job (not in a --py-files zip)


def _default(name: str) -> str | None:
    p = CONF_DIR / name
    return str(p) if p.exists() else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from rocketidx.cli import _duration, _positive_int, _size
    p = argparse.ArgumentParser(prog="backfill", description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True, help="the stopped broker's store directory")
    p.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    p.add_argument("--spark-conf", default=_default("spark.json"), help="Spark settings and split size (JSON)")
    p.add_argument("--master", default=None, help="only when not launched by spark-submit (default local[*])")
    p.add_argument("--hash-slots", type=_positive_int, default=None, help="default: the existing files' size")
    p.add_argument("--index-num", type=_positive_int, default=None, help="default: the existing files' size")
    p.add_argument("--window", type=_duration("window"), default=0,
                   help="window length of the new files (default 0: one sequence, as the broker writes)")
    p.add_argument("--timezone", default="local", help="zone of new file names (default: this host's)")
    p.add_argument("--no-crc", action="store_true")
    p.add_argument("--split-bytes", type=_size, default=None)
    p.add_argument("--partitions", type=_positive_int, default=None, help="writer partitions (default: cores)")
    p.add_argument("--json", action="store_true", help="print the plan and the result as JSON")
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * min(a.verbose, 2), format="%(levelname)s %(name)s: %(message)s")
    from rocketidx.errors import ConfigError, RocketIdxError, StoreLayoutError, StoreLockedError
    from rocketidx.spark.backfill import run_backfill_spark
    try:
        result, stats = run_backfill_spark(
            a.store, spark_conf=a.spark_conf, master=a.master, split_bytes=a.split_bytes, partitions=a.partitions,
            hash_slot_num=a.hash_slots, index_num=a.index_num, window_ms=a.window, timezone_name=a.timezone,
            dry_run=a.dry_run, check_crc=not a.no_crc, log=(lambda *_: None) if a.json else print)
    except (ConfigError, StoreLayoutError, StoreLockedError, OSError) as e:
        print(f"backfill: {e}", file=sys.stderr)
        return 2
    except RocketIdxError as e:
        print(f"backfill: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps({"plan": result.plan.as_dict(), "installed": result.installed,
                          "backup_dir": result.backup_dir, "checkpoint_index_msg_timestamp": result.checkpoint_index_ts,
                          "wall_s": round(result.wall_s, 3), "spark": stats or None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
