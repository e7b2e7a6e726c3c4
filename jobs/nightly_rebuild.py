"""Nightly rebuild of a RocketMQ store's message-key index on Spark.

In: a store (or CommitLog) directory and an output directory; index settings from ``conf/defaults.json``
(``--conf``), Spark settings and the split size from ``conf/spark.json`` (``--spark-conf``), flags win.
Out: ``OUT/index/``, ``OUT/_manifest.json``, ``OUT/_SUCCESS`` swapped in atomically; the summary on
stdout. Exit codes as the command line's (``rocketidx.cli.exit_code``): 0 done; 1 ``--strict`` and reading
stopped early or a broker rule left entries out; 2 it could not run (arguments, paths, lock, an output of
another kind without ``--overwrite``, a range that selects no message, a log that is not one); 130 interrupted.

    # package rocketidx's Python sources once (executors import them from the zip)
    .venv/bin/python -c "from rocketidx.spark.session import build_py_files; build_py_files('dist')"

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

import logging
import sys


def main(argv: list[str] | None = None) -> int:
    from rocketidx.interrupts import run_interruptible
    return run_interruptible("nightly_rebuild", _run, argv)  # Ctrl-C or SIGTERM anywhere: one line, exit 130


def _run(argv: list[str] | None) -> int:
    from rocketidx.cli import EXIT_CODES_HELP, exit_code
    from rocketidx.cli.build import add_build_arguments, report_build
    from rocketidx.cli.common import OneLineParser
    from rocketidx.config import build_request, project_conf, resolve_paths
    p = OneLineParser(prog="nightly_rebuild", description=__doc__.split("\n")[0], epilog=EXIT_CODES_HELP)
    # The defaults are the conf/ beside this job: the package itself may come from a --py-files zip, without one.
    add_build_arguments(p, conf=project_conf("defaults.json", beside=__file__),
                        spark_conf=project_conf("spark.json", beside=__file__), engine_flag=False)
    p.add_argument("-v", "--verbose", action="count", default=0)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * min(a.verbose, 2), format="%(levelname)s %(name)s: %(message)s")
    # The command line's exit codes, from the same map: 0 done, 1 the input has problems, 2 could not run.

    def run() -> int:
        resolve_paths(a)  # as the command line's: a relative path means the driver's directory, not a task's
        request = build_request(a.commitlog, a.out, conf=a.conf, broker_conf=a.broker_conf,
                                broker_version=a.broker_version, hash_slot_num=a.hash_slots, index_num=a.index_num,
                                cq_file_size=a.cq_file_size, window_ms=a.window, timezone=a.timezone,
                                check_crc=False if a.no_crc else None, targets=a.targets,
                                from_offset=a.from_offset, to_offset=a.to_offset, from_time_ms=a.from_time,
                                to_time_ms=a.to_time, time_index=a.time_index, overwrite=a.overwrite,
                                strict=a.strict, master=a.master, spark_conf=a.spark_conf,
                                split_bytes=a.split_bytes, partitions=a.partitions,
                                topic_config=a.topic_config, full=a.full)
        return report_build(request, as_json=a.json)
    return exit_code("nightly_rebuild", run, "the previous output is unchanged")


if __name__ == "__main__":
    sys.exit(main())
