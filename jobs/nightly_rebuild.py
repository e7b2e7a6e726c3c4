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
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def _default(name: str) -> str | None:
    p = CONF_DIR / name
    return str(p) if p.exists() else None


def main(argv: list[str] | None = None) -> int:
    from rocketidx.interrupts import run_interruptible
    return run_interruptible("nightly_rebuild", _run, argv)  # Ctrl-C or SIGTERM anywhere: one line, exit 130


def _run(argv: list[str] | None) -> int:
    from rocketidx.cli.build import add_build_arguments, run_build
    from rocketidx.cli import EXIT_CODES_HELP, exit_code, resolve_paths
    from rocketidx.cli.common import OneLineParser
    p = OneLineParser(prog="nightly_rebuild", description=__doc__.split("\n")[0], epilog=EXIT_CODES_HELP)
    add_build_arguments(p, conf=_default("defaults.json"), spark_conf=_default("spark.json"), engine_flag=False)
    p.add_argument("-v", "--verbose", action="count", default=0)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * min(a.verbose, 2), format="%(levelname)s %(name)s: %(message)s")
    # The command line's exit codes, from the same map: 0 done, 1 the input has problems, 2 could not run.

    def run() -> int:
        resolve_paths(a)  # as the command line's: a relative path means the driver's directory, not a task's
        return run_build(a)
    return exit_code("nightly_rebuild", run, "the previous output is unchanged")


if __name__ == "__main__":
    sys.exit(main())
