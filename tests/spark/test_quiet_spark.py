"""A Spark command is quiet by default: nothing on stderr but rocketidx's own lines (no log4j profile
lines, no loopback-hostname or native-hadoop warnings, no incubator-module notice, no progress bar);
``-v`` brings Spark's start-up log back."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROCKETIDX = [sys.executable, "-m", "rocketidx"]


def run(*argv, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("SPARK_LOCAL_IP", None)
    return subprocess.run([*ROCKETIDX, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_spark_build_prints_nothing_on_stderr_unless_verbose(tmp_path):
    gen = run("gen", "--out", "s", "--messages", "2000", cwd=tmp_path)
    assert gen.returncode == 0, gen.stderr
    build = ["build", "--commitlog", "s", "--out", "o", "--master", "local[1]", "--hash-slots", "1000",
             "--index-num", "10000", "--timezone", "UTC"]
    quiet = run(*build, cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""  # before: 9 lines of JVM and log4j chatter, and `\r[Stage 0:...]` bars
    assert "engine: spark" in quiet.stdout
    loud = run("-v", *build[:4], "o2", *build[5:], cwd=tmp_path)
    assert loud.returncode == 0, loud.stderr
    assert "log4j" in loud.stderr  # Spark's own start-up log, as Spark prints it
