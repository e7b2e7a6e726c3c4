"""``make faults``' ``executors`` part (issue 24): an executor lost in the middle of a job on a real cluster.

A Spark standalone cluster on 127.0.0.1 (tests/support/standalone.py: a master and two one-core workers), the S3 test
server (tests/support/s3server.py) holding a generated store's CommitLog, and docs/spark.md's recipe submitting the
nightly job with ``make dist``'s archive, from ``s3://`` into ``s3://``, ``--targets index,consumequeue``. One
uninterrupted run is the reference. Then ``--executor-kills`` runs, each into a fresh output, each with one of
the job's two executor JVMs killed with -9 after a random delay counted from the moment both executors are up:
the master starts a new one, Spark runs the lost tasks again.

Each run must finish (exit 0), its committed files (IndexFiles, ConsumeQueues) must be the reference's byte for
byte, and the output must hold the reference's objects and nothing else: no task directory of a lost attempt,
no second version, no lock. The run's event log says what the kill hit: the tasks lost with the executor
(``ExecutorLostFailure``) and the job they belonged to, or nothing running (between jobs).
"""
from __future__ import annotations

import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "support")]

JOB_ARGS = ["--targets", "index,consumequeue", "--window", "1h", "--timezone", "UTC", "--hash-slots", "10007",
            "--index-num", "40000", "--split-bytes", "4m", "--json"]


def lost_tasks(events: Path) -> tuple[Counter, set[str]]:
    """What the kill cost, from the event log: the tasks that did not succeed by their end reason
    (``ExecutorLostFailure``: running on the lost executor; ``Resubmitted``: finished, but their map output
    was lost with it; ``FetchFailed``: a reader of that output), and the jobs (their descriptions) they
    belonged to."""
    jobs, stage_job, reasons, where = {}, {}, Counter(), set()
    from standalone import events_of
    for e in events_of(events):
        kind = e["Event"]
        if kind == "SparkListenerJobStart":
            desc = (e.get("Properties") or {}).get("spark.job.description") or f"job {e['Job ID']}"
            jobs[e["Job ID"]] = re.sub(r": \d+ (splits|tasks)$", "", re.sub(r" -> .*", "", desc))
            for s in e.get("Stage IDs", []):
                stage_job[s] = e["Job ID"]
        elif kind == "SparkListenerTaskEnd" and e["Task End Reason"]["Reason"] != "Success":
            reasons[e["Task End Reason"]["Reason"]] += 1
            where.add(jobs.get(stage_job.get(e["Stage ID"]), f"stage {e['Stage ID']}"))
    return reasons, where


def snapshot(uri: str) -> dict[str, bytes]:
    """Every object under the output (the committed version's name made ``.v-*``), with its bytes; the
    manifest's build-time fields dropped, the rest kept."""
    import pyarrow.fs as pafs

    from rocketidx.output.remote import RemoteOutput
    out = RemoteOutput.from_uri(uri)
    version = out.current_version()
    got = {}
    for info in out.fs.get_file_info(pafs.FileSelector(out.root, recursive=True)):
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(out.root) + 1:]
        with out.fs.open_input_stream(info.path) as f:
            data = f.read()
        if rel == "CURRENT":
            data = b"<version>"
        elif rel.endswith("_manifest.json"):
            m = json.loads(data)
            data = json.dumps({k: v for k, v in m.items() if k in ("files", "consumequeues", "summary_counts",
                                                                   "settings")}, sort_keys=True).encode()
        got[rel.replace(version, ".v-*") if version else rel] = data
    return got


def _wait_executors(cluster, n: int, timeout: float = 120) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = cluster.executor_pids()
        if len(pids) >= n:
            return pids
        time.sleep(0.05)
    raise TimeoutError(f"{n} executors did not start in {timeout:.0f} s")


def _tasks_started(cluster, timeout: float = 300) -> float:
    """Wait until an executor runs a task (a Python worker daemon under an executor JVM: started by the first
    task); the moment, ``time.monotonic()``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        executors = {str(p) for p in cluster.executor_pids()}
        out = subprocess.run(["pgrep", "-f", "pyspark.daemon"], capture_output=True, text=True).stdout.split()
        for pid in out:
            try:
                ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
            except OSError:
                continue
            if ppid in executors:
                return time.monotonic()
        time.sleep(0.05)
    raise TimeoutError(f"no task started in {timeout:.0f} s")


def _until_no_executors(cluster, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while cluster.executor_pids() and time.monotonic() < deadline:
        time.sleep(0.2)


def run_executor_kills(kills: int, messages: int, seed: int, work: Path) -> tuple[Counter, list[dict]]:
    from s3server import S3Server, configure_environment
    from standalone import Cluster, dist_archive, event_log_conf, start_recipe

    from rocketidx.sample.generate import GenConfig, generate_store
    rng = random.Random(seed)
    counts, failures = Counter(), []
    store = work / "store"
    generate_store(store, GenConfig(messages=messages, segment_bytes=16 * 1024**2, span_ms=4 * 3_600_000))
    dist_archive()
    # An executor killed in the middle of an upload leaves the server a request cut short: werkzeug logs each as a
    # traceback ("Invalid chunk header"), which is the kill doing its work, not news.
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    server = S3Server(configure_environment())
    cluster = Cluster(workers=2, cores=1, memory="1g").start()
    try:
        bucket = server.new_bucket("faults")
        commitlog = f"s3://{bucket}/store/commitlog"
        server.upload_dir(str(store / "commitlog"), commitlog)

        def submit(name: str):
            events = work / "events" / name
            env = {"COMMITLOG": commitlog, "OUT": f"s3://{bucket}/{name}",
                   "SPARK_CONF_DIR": str(event_log_conf(work / "conf" / name, events))}
            (work / "runs" / name).mkdir(parents=True)
            return start_recipe(cluster, work / "runs" / name, env, JOB_ARGS), events

        t = time.monotonic()
        p, _ = submit("ref")
        _wait_executors(cluster, 2)
        up = time.monotonic()
        started = _tasks_started(cluster)
        out, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"the uninterrupted run failed (exit {p.returncode}): {err[-2000:]}")
        end = time.monotonic()
        want = snapshot(f"s3://{bucket}/ref")
        print(f"  reference: {end - t:.1f} s; the executors were up {end - up:.1f} s before its end, the first task "
              f"started {end - started:.1f} s before it; {len(want)} objects", flush=True)
        for k in range(kills):
            _until_no_executors(cluster)
            name = f"kill-{k}"
            # Every other kill counted from the first task (it lands in the tasks), the rest from the executors'
            # start (before the first job too, or between jobs).
            from_tasks = k % 2 == 0
            delay = rng.uniform(0, (end - (started if from_tasks else up)) * 0.95)
            p, events = submit(name)
            try:
                pids = _wait_executors(cluster, 2)
                if from_tasks:
                    _tasks_started(cluster)
                time.sleep(delay)
                victim = rng.choice(pids)
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                out, err = p.communicate(timeout=900)
                if p.returncode != 0:
                    raise AssertionError(f"exit {p.returncode}: {err[-1500:]}")
                summary = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
                if summary["reader"] != "kernel":
                    raise AssertionError(f"reader {summary['reader']}")
                got = snapshot(f"s3://{bucket}/{name}")
                if got.keys() != want.keys():
                    raise AssertionError(f"objects differ: extra {sorted(got.keys() - want.keys())[:5]}, "
                                         f"missing {sorted(want.keys() - got.keys())[:5]}")
                differ = [n for n in want if got[n] != want[n]]
                if differ:
                    raise AssertionError(f"{len(differ)} object(s) differ, the first {differ[0]}")
                reasons, where = lost_tasks(events)
                what = (", ".join(f"{n} {r}" for r, n in sorted(reasons.items())) + f" in {'; '.join(sorted(where))}"
                        if reasons else "no task lost (none ran on it then)")
                counts["executor killed: the job finished, byte-identical, no leftovers"] += 1
                counts[f"  the kill hit: {what}"] += 1
                print(f"  kill {k}: executor {victim} {delay:.1f} s after {'the first task' if from_tasks else 'both were up'}:"
                      f" {what}; output byte-identical, no leftovers", flush=True)
            except Exception:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                counts["FAILURE"] += 1
                failures.append({"part": "executors", "case": name, "delay": delay,
                                 "error": traceback.format_exc(limit=6)})
                print(f"  kill {k}: FAILURE {failures[-1]['error'].strip().splitlines()[-1][:300]}", flush=True)
    finally:
        cluster.stop()
        server.stop()
    return counts, failures
