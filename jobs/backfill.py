"""Crash backfill of a stopped RocketMQ broker's message-key index, on Spark.

In: the broker's store directory (``commitlog/``, ``index/``, ``checkpoint``, ``abort``, ``lock``), which
the driver must see as a local or mounted path, since it takes the broker's lock and installs files
there. Spark settings and the split size come from ``conf/spark.json`` (``--spark-conf``), flags win.
Out: the plan on stdout; unless ``--dry-run``, the lost range rebuilt on Spark, verified, and installed
file by file (replaced files and the old checkpoint moved to ``STORE/index.backup/<stamp>/``), then the
checkpoint's indexMsgTimestamp updated. Exit codes as the command line's (``rocketidx.cli.exit_code``):
0 done (or nothing to do); 2 it could not run (arguments, paths, a running broker holding the lock, a
rebuild that failed on its input or did not verify: nothing installed); 130 interrupted.

    .venv/bin/python -c "from rocketidx.spark.session import build_py_files; build_py_files('dist')"

    spark-submit --master yarn --deploy-mode client \\
        --py-files dist/rocketidx.zip \\
        --conf spark.pyspark.python=/opt/rocketidx-env/bin/python \\
        jobs/backfill.py --store /data/rocketmq/store [--dry-run] [--hash-slots N --index-num N] \\
        [--window 0] [--timezone Asia/Shanghai] [--split-bytes 128m] [--partitions N] [--json]

Executors read the CommitLog and write the new files into ``STORE/index.rocketidx-staging/<stamp>/``: with
executors on other hosts, the store must be a mount they share with the driver.
"""
from __future__ import annotations

import logging
import sys

def main(argv: list[str] | None = None) -> int:
    from rocketidx.interrupts import run_interruptible
    return run_interruptible("backfill", _run, argv)  # Ctrl-C or SIGTERM anywhere: one line, exit 130


def _run(argv: list[str] | None) -> int:
    from rocketidx.cli import EXIT_CODES_HELP, INTERRUPTED_LEAVES, exit_code
    from rocketidx.cli.backfill import add_backfill_arguments, report_backfill
    from rocketidx.cli.common import OneLineParser
    from rocketidx.config import backfill_request, project_conf, resolve_paths
    p = OneLineParser(prog="backfill", description=__doc__.split("\n")[0], epilog=EXIT_CODES_HELP)
    # The defaults are the conf/ beside this job: the package itself may come from a --py-files zip, without one.
    add_backfill_arguments(p, spark_conf=project_conf("spark.json", beside=__file__), engine_flag=False)
    p.add_argument("-v", "--verbose", action="count", default=0)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * min(a.verbose, 2), format="%(levelname)s %(name)s: %(message)s")
    # The command line's exit codes, from the same map: 0 done, 1 the input has problems, 2 could not run.

    def run() -> int:
        resolve_paths(a)  # as the command line's: a relative path means the driver's directory, not a task's
        request = backfill_request(a.store, targets=a.targets, dry_run=a.dry_run, window_ms=a.window,
                                   hash_slot_num=a.hash_slots, index_num=a.index_num, timezone=a.timezone,
                                   check_crc=not a.no_crc, remove_unexplained=a.remove_unexplained,
                                   cq_file_size=a.cq_file_size, broker_conf=a.broker_conf,
                                   broker_version=a.broker_version, master=a.master, spark_conf=a.spark_conf,
                                   split_bytes=a.split_bytes, partitions=a.partitions)
        return report_backfill(request, as_json=a.json)
    return exit_code("backfill", run, INTERRUPTED_LEAVES["backfill"])


if __name__ == "__main__":
    sys.exit(main())
