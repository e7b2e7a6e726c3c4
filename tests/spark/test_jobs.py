"""The job as it runs for real: a killed driver leaves the previous output answering as before, and
``spark-submit --master local-cluster[2,1,1024]`` (separate executor JVMs and Python workers, another
working directory, rocketidx shipped with ``--py-files``) gives the in-process build's bytes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from refdata import GOLDEN

from rocketidx.build.in_process import build_index
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.config import BuildConfig
from rocketidx.query.lookup import open_index, query_offsets
from rocketidx.spark.session import build_py_files

from splitread import same_build

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "jobs" / "nightly_rebuild.py"


def answers(out: Path, keys: list[tuple[str, str]]) -> list[list[int]]:
    files = open_index(out)
    return [query_offsets(files, topic, key) for topic, key in keys]


def test_killing_the_driver_mid_write_leaves_the_previous_output_answering(spark, tmp_path):
    store = tmp_path / "store"
    generate_store(store, GenConfig(messages=20_000, segment_bytes=2 * 1024**2, body_bytes=100,
                                    span_ms=4 * 3_600_000, seed=3))
    out = tmp_path / "out"
    # Full-size files (5,000,000 slots, 20,000,000 items) make each window's write take a while.
    config = BuildConfig(timezone="UTC")
    build_index(store, out, config)
    keys = [(f"Topic{i % 4}", f"K{i * 37}") for i in range(40)]
    before = answers(out, keys)
    manifest_before = (out / "_manifest.json").read_text()
    assert sum(map(len, before)) > 0

    script = textwrap.dedent(f"""
        import os, sys
        os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from rocketidx.config import BuildConfig
        from rocketidx.spark.build import build_index_spark
        build_index_spark({str(store)!r}, {str(out)!r}, BuildConfig(timezone="UTC"), master="local[2]",
                          split_bytes=1 << 20, shuffle_partitions=2)
        print("FINISHED")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 240
        while not list(out.glob(".v-*/_tasks/*/*")):  # a writer task has started a file
            assert proc.poll() is None, "the build ended before the test could kill it"
            assert time.monotonic() < deadline, "no writer task started"
            time.sleep(0.02)
    finally:
        # The driver's group; its JVM, in a group of its own, ends at EOF on its pipe.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "FINISHED" not in proc.stdout.read()
    assert (out / "_SUCCESS").exists()
    assert (out / "_manifest.json").read_text() == manifest_before
    assert answers(out, keys) == before

    # The next build starts over, removes what the killed one left, and gives the same bytes again.
    from rocketidx.spark.build import build_index_spark
    rebuilt = tmp_path / "rebuilt"
    build_index(store, rebuilt, config)
    build_index_spark(store, out, config, spark=spark, split_bytes=1 << 20, shuffle_partitions=2)
    assert same_build(rebuilt, out) == []
    assert [p.name for p in out.glob(".v-*")] == [(out / "current").resolve().name]
    assert answers(out, keys) == before


def test_spark_submit_on_a_local_cluster_gives_the_in_process_bytes(tmp_path):
    case = GOLDEN / "g3-single-window-tiny-files"
    expected = tmp_path / "expected"
    build_index(case / "commitlog", expected, BuildConfig(97, 50, 0, "UTC"))
    work = tmp_path / "submit"  # not the project: nothing may rely on the driver's working directory
    work.mkdir()
    py_files = build_py_files(work / "dist")
    import pyspark
    env = dict(os.environ, SPARK_HOME=os.path.dirname(pyspark.__file__), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    spark_submit = Path(sys.executable).parent / "spark-submit"
    out = tmp_path / "out"
    p = subprocess.run(
        [str(spark_submit), "--master", "local-cluster[2,1,1024]", "--py-files", str(py_files),
         "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.ui.showConsoleProgress=false",
         "--conf", "spark.ui.enabled=false",
         str(JOB), "--commitlog", str(case), "--out", str(out), "--hash-slots", "97", "--index-num", "50",
         "--window", "0", "--timezone", "UTC", "--split-bytes", "131072", "--json"],
        cwd=work, env=env, capture_output=True, text=True, timeout=600, start_new_session=True)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    # One window: the direct plan reads the three segments in one task on an executor.
    assert summary["spark"]["mode"] == "direct" and summary["spark"]["splits"] == 3 and summary["files"] == 65
    assert same_build(expected, out) == []
