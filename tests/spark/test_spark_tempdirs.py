"""Spark's temp directories go away with the process that made the session, without stack traces: after a
notebook kernel shuts down (the kernel signals every process of its group, again and again) and after
``kill -9`` of a driver's process group, as the fault harness and the kill tests do.

Each run points the driver JVM's ``java.io.tmpdir`` (where a local session keeps ``spark-*``, ``blockmgr-*``
and ``artifacts-*``) and ``TMPDIR`` at a directory of the test's own, and checks it is empty once the JVM
has exited.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

NOISE = ("Failed to delete", "Exception while deleting")
SPARK_DIRS = ("spark-", "blockmgr-", "artifacts-", "pyspark-", "userFiles-")  # what a local driver makes


def left_behind(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(SPARK_DIRS))


def session_code(tmp: Path) -> str:
    """A local session made by get_session, Python workers and block files on disk, the JVM's pid printed."""
    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2",
            "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={tmp}"}
    return textwrap.dedent(f"""
        from pyspark import SparkContext, StorageLevel
        from rocketidx.spark.session import get_session
        spark = get_session("local[2]", {conf!r})
        rdd = spark.sparkContext.parallelize(range(1000), 2).map(lambda x: x * 2).persist(StorageLevel.DISK_ONLY)
        assert rdd.count() == 1000
        print("JVM", SparkContext._gateway.proc.pid, flush=True)
    """)


def wait_gone(pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the driver JVM (pid {pid}) still runs {timeout}s after its Python process ended")


def env_with_tmp(tmp: Path) -> dict[str, str]:
    return dict(os.environ, TMPDIR=str(tmp), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)


def test_a_killed_driver_leaves_no_spark_temp_directory(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = session_code(tmp) + "import time; print('READY', flush=True); time.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env_with_tmp(tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        jvm = int(proc.stdout.readline().split()[1])
        assert proc.stdout.readline().strip() == "READY"
        group = os.getpgid(jvm)
        assert any(name.startswith("blockmgr-") for name in left_behind(tmp)), "the test's tmpdir is Spark's"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver's whole group, as bench/campaigns/faults.py kills a build
        proc.wait()
    wait_gone(jvm)
    stderr = proc.stderr.read()
    assert not [n for n in NOISE if n in stderr], stderr[-3000:]
    assert left_behind(tmp) == [], "the JVM was killed with its driver: it could not clean up"
    assert group == jvm, "the driver JVM leads a process group of its own"


def test_a_notebook_kernel_shuts_down_without_stack_traces_or_leftovers(tmp_path):
    from jupyter_client import KernelManager
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    log = tmp_path / "kernel.stderr"
    km = KernelManager(kernel_name="python3")
    with open(log, "w") as err:  # the kernel's stderr, which its JVM inherits
        km.start_kernel(env=env_with_tmp(tmp), stderr=err, cwd=str(tmp_path))
    kc = km.client()
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        out = []
        reply = kc.execute_interactive(session_code(tmp), timeout=180,
                                       output_hook=lambda m: out.append(m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok", reply["content"]
        jvm = int("".join(out).split("JVM")[1].split()[0])
        # At shutdown the kernel SIGTERMs, again and again, every other process of its group: that must not
        # include the JVM, nor the `rm -rf` processes its shutdown hooks start to delete Spark's directories.
        assert os.getpgid(jvm) != km.provisioner.pgid, "the driver JVM is in the kernel's process group"
    finally:
        kc.stop_channels()
        km.shutdown_kernel()  # graceful: a shutdown request, then the kernel ends its children
    wait_gone(jvm)
    stderr = log.read_text()
    assert not [n for n in NOISE if n in stderr], stderr[-3000:]
    assert left_behind(tmp) == [], sorted(os.listdir(tmp))
