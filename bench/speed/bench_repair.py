"""Whole-store repair benchmark (issue 23): ``backfill --targets index,consumequeue`` of the 4.1 GB store with two
queues damaged, against a full ``build --targets index,consumequeue`` of the same store.

The store: ``bench-data/store-6m``'s CommitLog (bench_engine.py generates it), with the index and the queues a
full in-process build writes (one sequence of IndexFiles, as the broker writes them). Damage, redone before
each run: one queue deleted, another's newest file given a dirty tail (an entry past the log's end); the index
stays intact. Measured, whole process, page cache warm, medians of ``--repeat``:

* build:  ``rocketidx build --targets index,consumequeue --window 0``;
* repair: ``rocketidx backfill --store STORE --targets index,consumequeue``;
* and, not against a target, ``rocketidx verify --store STORE`` of the damaged store;

each in process and on ``local[2]`` (``--engines``).

Target: the repair at most 1.2x the build. Every repair is checked to leave ``consumequeue/`` byte-identical
to the build's. Results: stdout and ``bench-data/results-repair.json``. Usage:
``python bench/speed/bench_repair.py [--repeat 3] [--engines in-process,local[2]]``.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench-data"
sys.path.insert(0, str(ROOT / "bench" / "speed"))
CLI = [sys.executable, "-m", "rocketidx"]


def _run(args: list[str], ok: tuple[int, ...] = (0,)) -> float:
    t = time.perf_counter()
    p = subprocess.run(CLI + args, capture_output=True, text=True, cwd=ROOT)
    if p.returncode not in ok:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}: {p.stderr[-1500:]}")
    return time.perf_counter() - t


def _damage(store: Path, clean: Path) -> tuple[str, str]:
    """Restore the two victims from ``clean``, then delete the first and give the second a dirty tail."""
    cq = store / "consumequeue"
    queues = sorted(q.relative_to(cq) for t in cq.iterdir() for q in t.iterdir())
    gone, dirty = queues[0], queues[len(queues) // 2]
    for q in (gone, dirty):
        shutil.rmtree(cq / q, ignore_errors=True)
        shutil.copytree(clean / q, cq / q)
    shutil.rmtree(cq / gone)
    newest = sorted((cq / dirty).iterdir())[-1]
    data = bytearray(newest.read_bytes())
    free = next(i for i in range(0, len(data), 20) if data[i + 8:i + 12] == b"\0\0\0\0")
    data[free:free + 20] = (10**15).to_bytes(8, "big") + (300).to_bytes(4, "big") + bytes(8)
    newest.write_bytes(bytes(data))
    return str(gone), str(dirty)


def _measure(source: Path, work: Path, flags: list[str], repeat: int) -> dict:
    """Medians of ``repeat`` builds and repairs with the engine ``flags``; every repair checked."""
    builds = []
    for _ in range(repeat):
        shutil.rmtree(work / "built", ignore_errors=True)
        builds.append(_run(["build", "--commitlog", str(source), "--out", str(work / "built"), *flags,
                            "--targets", "index,consumequeue", "--window", "0", "--timezone", "UTC"]))
    built = (work / "built").resolve()
    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir()
    (store / "commitlog").symlink_to((source / "commitlog").resolve())
    shutil.copytree(built / "index", store / "index")
    shutil.copytree(built / "consumequeue", store / "consumequeue")
    index = {f.name: (f.stat().st_ino, f.stat().st_size) for f in (store / "index").iterdir()}
    repairs, checks = [], []
    for _ in range(repeat):
        gone, dirty = _damage(store, built / "consumequeue")
        checks.append(_run(["verify", "--store", str(store), *flags, "--json"], ok=(1,)))  # 1: problems found
        repairs.append(_run(["backfill", "--store", str(store), "--targets", "index,consumequeue", *flags,
                             "--timezone", "UTC"]))
        cmp = filecmp.dircmp(store / "consumequeue", built / "consumequeue")
        if cmp.diff_files or cmp.left_only or cmp.right_only or any(
                not filecmp.cmp(store / "consumequeue" / q / f, built / "consumequeue" / q / f, shallow=False)
                for q in (gone, dirty) for f in os.listdir(built / "consumequeue" / q)):
            raise RuntimeError("the repaired queues are not the build's")
        if {f.name: (f.stat().st_ino, f.stat().st_size) for f in (store / "index").iterdir()} != index:
            raise RuntimeError("the repair touched the intact index")
    b, r = statistics.median(builds), statistics.median(repairs)
    return {"build_s": round(b, 2), "repair_s": round(r, 2), "repair_over_build": round(r / b, 2),
            "verify_store_s": round(statistics.median(checks), 2),
            "damaged": [gone, dirty], "builds": [round(x, 2) for x in builds],
            "repairs": [round(x, 2) for x in repairs]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engines", default="in-process,local[2]",
                    help="comma-separated: in-process and/or Spark masters (default in-process,local[2])")
    a = ap.parse_args(argv)
    from bench_engine import ensure_store, warm
    source = ensure_store("store-6m")
    warm(source)
    work = DATA / "repair"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results = {}
    for engine in a.engines.split(","):
        flags = ["--in-process"] if engine == "in-process" else ["--master", engine]
        results[engine] = _measure(source, work, flags, a.repeat)
        r = results[engine]
        print(f"store-6m on {engine}: build --targets index,consumequeue {r['build_s']:.2f}s; backfill --targets "
              f"index,consumequeue with two queues damaged {r['repair_s']:.2f}s = {r['repair_over_build']:.2f}x "
              f"(target <= 1.2); verify --store of the damaged store {r['verify_store_s']:.2f}s")
    (DATA / "results-repair.json").write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
