"""The in-process engine on every core (issue 35, Must show 3): ``rocketidx build --in-process --workers 2``
against ``--workers 1``, whole processes, paired round by round in one run (so a machine's drift hits both), on
store-6m with ``--targets index`` and ``--targets index,consumequeue``; medians and the ratio (target: at least
1.7x). With ``--oracle-build DIR`` (a build of the RocketMQ oracle of the team's shared reference tools), RocketMQ's own
``oracle.IndexBuild`` warm loop on the 1.79 GB yardstick store-1g against the 2-worker build of it, whole process,
paired (target: at least 1.8x). Every store-6m build's files are compared with the first one's.

Usage: ``python bench/speed/bench_workers.py [--rounds 3] [--workers 2] [--oracle-build DIR]``; results in
``bench-data/results-workers.json``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import CLI, DATA, ENV, compile_package, ensure_store, same_outputs, warm  # noqa: E402


def build(store: Path, out: Path, targets: str, workers: int) -> float:
    """One whole ``rocketidx build`` process; its wall time."""
    t = time.monotonic()
    subprocess.run([*CLI, "build", "--commitlog", str(store), "--out", str(out), "--in-process", "--timezone", "UTC",
                    "--time-index", "none", "--targets", targets, "--workers", str(workers)],
                   check=True, env=ENV, stdout=subprocess.DEVNULL)
    return time.monotonic() - t


def same_files(a: Path, b: Path) -> bool:
    """The two outputs' committed files, byte for byte."""
    return same_outputs(a, b)


def paired(store: Path, targets: str, workers: int, rounds: int) -> dict:
    """``rounds`` pairs of builds, one worker then ``workers``; medians, ratio, and whether all files agreed."""
    walls: dict[int, list[float]] = {1: [], workers: []}
    first, identical = None, True
    for _ in range(rounds):
        for w in (1, workers):
            out = Path(tempfile.mkdtemp(dir=DATA)) / "out"
            walls[w].append(round(build(store, out, targets, w), 2))
            if first is None:
                first = out
            else:
                identical &= same_files(first, out)
                shutil.rmtree(out.parent)
    shutil.rmtree(first.parent)
    one, many = statistics.median(walls[1]), statistics.median(walls[workers])
    return {"workers_1_s": walls[1], f"workers_{workers}_s": walls[workers], "median_1_s": one,
            f"median_{workers}_s": many, "speedup": round(one / many, 2), "files_identical": identical}


def rocketmq_warm_loop(oracle: Path, commitlog: Path) -> float:
    """RocketMQ's own parse + putKey loop over the log, warm (``oracle.IndexBuild`` runs it twice and times the
    loop alone, without the JVM's start or the files' flush), in seconds."""
    out = Path(tempfile.mkdtemp(prefix="rocketmq-index-"))
    try:
        p = subprocess.run(["java", "-cp", (oracle / "cp.txt").read_text().strip(),
                            "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "oracle.IndexBuild", str(commitlog),
                            str(out / "idx"), "5000000", "20000000", "3600000"], check=True, capture_output=True,
                           text=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    line = next(x for x in p.stdout.splitlines() if x.startswith("RESULT "))
    return float(dict(kv.split("=", 1) for kv in line.split()[1:])["warm_loop_ms"]) / 1000


def against_rocketmq(oracle: Path, workers: int, rounds: int) -> dict:
    """store-1g (the 1.79 GB yardstick): RocketMQ's warm loop and this build on ``workers``, whole process,
    paired round by round; medians and the ratio (target: at least 1.8x)."""
    store = ensure_store("store-1g")
    warm(store)
    theirs, ours = [], []
    for _ in range(rounds):
        theirs.append(round(rocketmq_warm_loop(oracle, store / "commitlog"), 2))
        out = Path(tempfile.mkdtemp(dir=DATA)) / "out"
        ours.append(round(build(store, out, "index", workers), 2))
        shutil.rmtree(out.parent)
    r = {"rocketmq_warm_loop_s": theirs, f"workers_{workers}_s": ours, "median_rocketmq_s": statistics.median(theirs),
         "median_s": statistics.median(ours), "speedup": round(statistics.median(theirs) / statistics.median(ours), 2)}
    print(f"store-1g: RocketMQ's warm loop {r['median_rocketmq_s']:.2f} s, {workers} workers {r['median_s']:.2f} s "
          f"whole process: {r['speedup']:.2f}x", flush=True)
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--oracle-build", default=None,
                    help="a build of the shared RocketMQ oracle (its ORACLE_BUILD directory, with cp.txt): its "
                         "IndexBuild on store-1g, paired with the workers' build round by round")
    a = ap.parse_args(argv)
    compile_package()
    results: dict = {}
    store = ensure_store("store-6m")
    warm(store)
    for targets in ("index", "index,consumequeue"):
        r = results[f"store-6m {targets}"] = paired(store, targets, a.workers, a.rounds)
        print(f"store-6m --targets {targets}: 1 worker {r['median_1_s']:.2f} s, {a.workers} workers "
              f"{r[f'median_{a.workers}_s']:.2f} s: {r['speedup']:.2f}x (files identical: {r['files_identical']})",
              flush=True)
    if a.oracle_build:
        results["store-1g vs RocketMQ"] = against_rocketmq(Path(a.oracle_build), a.workers, a.rounds)
    (DATA / "results-workers.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
