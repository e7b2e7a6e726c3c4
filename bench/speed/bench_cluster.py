"""The job on a Spark standalone cluster (issue 24): the 4.1 GB ``store-6m`` (bench_engine.py generates it) built by
``jobs/nightly_rebuild.py`` on a master and two one-core workers (tests/support/standalone.py), twice:

* ``archive``: docs/spark.md's cluster block as written, with ``make dist``'s ``rocketidx-env.tar.gz``: the
  executors run the compiled kernel;
* ``zip``: the same job with ``--py-files dist/rocketidx.zip`` and this environment's Python on the executors
  (numpy, pyarrow and pandas, rocketidx from the zip alone): the numpy reader.

The store and the output are local paths (every process of this one-machine cluster sees them). Measured per
run: the submission's wall time (the whole block, unpacking included), the job's own ``process_wall_s``, and
the executors' summed task time (the ``Executor Run Time`` of every task, from Spark's event log). Target: the
summed task time at least 3x lower with the archive; the zip run's summary carries the numpy warning. Every
output is checked byte-identical to the other run's. Results: stdout and ``bench-data/results-cluster.json``.
Usage: ``python bench/speed/bench_cluster.py [--store store-6m]``.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench-data"
sys.path[:0] = [str(ROOT / "bench" / "speed"), str(ROOT / "tests" / "support")]

JOB_ARGS = ["--window", "1h", "--timezone", "UTC"]


def task_seconds(events: Path) -> tuple[float, int]:
    """The summed ``Executor Run Time`` of the event log's tasks (seconds), and how many tasks."""
    from standalone import events_of
    ms = [e["Task Metrics"]["Executor Run Time"] for e in events_of(events)
          if e["Event"] == "SparkListenerTaskEnd" and e.get("Task Metrics")]
    return sum(ms) / 1000, len(ms)


def submit(kind: str, cluster, work: Path, commitlog: Path, out: Path) -> dict:
    """One run of the job on the cluster, its summary as a person reads it (the warning is one of its lines);
    its figures."""
    from standalone import event_log_conf, spark_home, start_recipe
    events = work / f"events-{kind}"
    shutil.rmtree(events, ignore_errors=True)
    conf = event_log_conf(work / f"conf-{kind}", events)
    run_dir = work / kind
    run_dir.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    if kind == "archive":
        p = start_recipe(cluster, run_dir, {"COMMITLOG": str(commitlog), "OUT": str(out), "SPARK_CONF_DIR": str(conf)},
                         JOB_ARGS)
    else:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(SPARK_HOME=spark_home(), SPARK_CONF_DIR=str(conf))
        p = subprocess.Popen([str(ROOT / ".venv" / "bin" / "spark-submit"), "--master", cluster.url,
                              "--py-files", str(ROOT / "dist" / "rocketidx.zip"),
                              "--conf", f"spark.pyspark.python={sys.executable}",
                              "--conf", f"spark.pyspark.driver.python={sys.executable}",
                              str(ROOT / "jobs" / "nightly_rebuild.py"), "--commitlog", str(commitlog),
                              "--out", str(out), *JOB_ARGS],
                             cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = p.communicate()
    wall = time.monotonic() - t
    if p.returncode != 0:
        raise SystemExit(f"the {kind} run failed (exit {p.returncode}):\n{stdout[-2000:]}\n{stderr[-3000:]}")
    busy, tasks = task_seconds(events)
    return {"end_to_end_s": round(wall, 1), "task_s": round(busy, 1), "tasks": tasks,
            "warning": next((line.strip() for line in stdout.splitlines() if "numpy reader" in line), None)}


def same_outputs(a: Path, b: Path) -> bool:
    """The two outputs' committed files (IndexFiles, manifest's file list aside) are byte-identical."""
    from rocketidx.output.target import read_manifest
    ma, mb = read_manifest(str(a)), read_manifest(str(b))
    if [f["name"] for f in ma["files"]] != [f["name"] for f in mb["files"]]:
        return False
    ia, ib = a / "index", b / "index"
    return all(filecmp.cmp(ia / f["name"], ib / f["name"], shallow=False) for f in ma["files"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default="store-6m", help="a store of bench_engine.py's (generated when missing)")
    ap.add_argument("--worker-memory", default="2g")
    a = ap.parse_args(argv)
    from bench_engine import ensure_store
    from s3server import configure_environment
    from standalone import Cluster, dist_archive
    store = ensure_store(a.store)
    built = dist_archive()[1]
    if built:
        print(f"make dist's archive built in {built:.0f} s")
    configure_environment()  # the recipe names the S3 settings; this run reads and writes local paths
    work = DATA / "cluster"
    shutil.rmtree(work, ignore_errors=True)
    cluster = Cluster(workers=2, cores=1, memory=a.worker_memory).start()
    results = {}
    try:
        for kind in ("archive", "zip"):
            print(f"{a.store} on the standalone cluster (2 workers x 1 core), {kind} ...", flush=True)
            results[kind] = r = submit(kind, cluster, work, store / "commitlog", work / f"out-{kind}")
            print(f"  {kind:8s} end to end {r['end_to_end_s']:.1f} s; executors' summed task time {r['task_s']:.1f} s "
                  f"({r['tasks']} tasks); {'warning: ' + repr(r['warning']) if r['warning'] else 'no reader warning'}",
                  flush=True)
    finally:
        cluster.stop()
    ratio = results["zip"]["task_s"] / results["archive"]["task_s"]
    identical = same_outputs(work / "out-archive", work / "out-zip")
    results.update(ratio=round(ratio, 2), identical=identical, store=a.store)
    print(f"  summed task time, zip / archive: {ratio:.2f}x (target at least 3x); outputs byte-identical: {identical}")
    problems = [m for m, bad in [("the archive run warned of the numpy reader", results["archive"]["warning"]),
                                 ("the zip run did not warn of the numpy reader", not results["zip"]["warning"]),
                                 ("the outputs differ", not identical)] if bad]
    for m in problems:
        print(f"  PROBLEM: {m}")
    for kind in ("archive", "zip"):
        shutil.rmtree(work / f"out-{kind}", ignore_errors=True)
    DATA.mkdir(exist_ok=True)
    (DATA / "results-cluster.json").write_text(json.dumps(results, indent=2) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
