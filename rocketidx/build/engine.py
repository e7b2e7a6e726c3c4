"""Which engine runs a command: this Python process, or Spark. One rule, for build, backfill, verify, stats.

In: how many bytes the command will read, the user's flags (``--in-process``, ``--master``), whether
spark-submit started this process, and the break-even size (``engine_break_even`` in
``conf/spark.json``). Out: an :class:`Engine` naming the engine and the reason, which every command
prints in its summary.

Why a break-even: a local Spark session costs seconds of JVM start and a first job before it reads a
byte, then reads with every core; the in-process core reads at several hundred MB/s on one. Below the
break-even the single process finishes first; ``make bench`` measures where the two meet on this
machine (``bench/speed/bench_engine.py``), and the default in ``conf/spark.json`` is that figure.
A build runs in process on a worker per core (:mod:`rocketidx.build.pool`): with every core in use the two
engines no longer meet on one machine, so for a build the size picks nothing (``workers``).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from rocketidx.config import DEFAULT_BREAK_EVEN  # noqa: F401  (where a local Spark session pays off)
from rocketidx.errors import ConfigError
from rocketidx.units import human_bytes  # noqa: F401  (the reasons say sizes in it)

IN_PROCESS, SPARK = "in-process", "spark"


@dataclass(frozen=True)
class Engine:
    name: str  # IN_PROCESS | SPARK
    reason: str

    @property
    def spark(self) -> bool:
        return self.name == SPARK

    def as_dict(self) -> dict:
        return {"name": self.name, "reason": self.reason}


def launched_by_spark_submit() -> bool:
    """True inside a driver that spark-submit (or the pyspark shell) started: it already chose a master."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


# Spark's master URL forms (SparkContext.createTaskScheduler and the cluster managers' own).
_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\s*\d+)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]|"
                     r"yarn|(spark|k8s|mesos)://\S+)$")


def check_master(master: str) -> None:
    """Reject a master Spark would only reject after starting a JVM, with a 40-line trace."""
    if not _MASTER.match(master):
        raise ConfigError("--master", master, "not a Spark master: local, local[N], local[*], "
                                              "local-cluster[N,C,MB], yarn, spark://HOST:PORT, k8s://URL")


def choose_engine(work_bytes: int, *, in_process: bool = False, master: str | None = None,
                  break_even: int = DEFAULT_BREAK_EVEN, spark_only: str | None = None,
                  in_process_only: str | None = None, workers: int | None = None) -> Engine:
    """The engine for a command that reads ``work_bytes``.

    Flags decide first (spark-submit always means Spark); ``spark_only``/``in_process_only`` name a
    reason one engine cannot run this command (e.g. a URI output); otherwise the size decides, against
    ``break_even``. ``workers``: the command runs in process on that many workers (a build), which a local
    Spark session on the same machine does not beat at any size (docs/benchmarks.md, "In process on every
    core"): the size then picks nothing, and only a flag or ``spark_only`` runs it on Spark.
    """
    if in_process and master:
        raise ConfigError("--in-process", master, "--in-process and --master exclude each other")
    if launched_by_spark_submit():
        if in_process:
            raise ConfigError("--in-process", True, "this process was started by spark-submit: it runs on Spark")
        return Engine(SPARK, "started by spark-submit")
    if master:
        check_master(master)
        if in_process_only:
            raise ConfigError("--master", master, in_process_only)
        return Engine(SPARK, f"--master {master}")
    if in_process:
        if spark_only:
            raise ConfigError("--in-process", True, spark_only)
        return Engine(IN_PROCESS, "--in-process")
    if spark_only:
        return Engine(SPARK, spark_only)
    if in_process_only:
        return Engine(IN_PROCESS, in_process_only)
    if workers is not None:
        return Engine(IN_PROCESS, f"{human_bytes(work_bytes)} to read, on {workers} worker(s): Spark on this one "
                                  "machine does not beat them at any size; --master M runs it on a cluster")
    if work_bytes >= break_even:
        return Engine(SPARK, f"{human_bytes(work_bytes)} to read, at least the break-even "
                             f"{human_bytes(break_even)} (engine_break_even in conf/spark.json)")
    return Engine(IN_PROCESS, f"{human_bytes(work_bytes)} to read, below the break-even {human_bytes(break_even)} "
                              "(engine_break_even in conf/spark.json); --master M runs it on Spark")


def data_bytes(segments, from_offset: int | None = None, to_offset: int | None = None) -> int:
    """The CommitLog bytes a read of ``[from_offset, to_offset)`` covers, counting a local segment's
    allocated blocks rather than its length (a broker's newest segment is mostly unwritten)."""
    total = 0
    for s in segments:
        lo = max(s.base_offset, from_offset or 0)
        hi = min(s.end_offset, to_offset if to_offset is not None else s.end_offset)
        if hi <= lo:
            continue
        size = hi - lo
        try:
            size = min(size, os.stat(s.path).st_blocks * 512)
        except (OSError, ValueError):
            pass  # a URI: its length is what it holds
        total += size
    return total
