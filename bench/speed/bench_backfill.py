"""Backfill benchmark: a crashed broker's store rebuilt by ``rocketidx backfill`` versus a full rebuild.

The store: ``bench-data/store-1g`` (2.5 million messages, 1.79 GB of CommitLog; ``bench/speed/bench.py``
generates it). Its index is laid out as a broker writes it (one sequence of files, no windows,
``--hash-slots``/``--index-num``, default 500,000 / 1,000,000: seven files), then the broker "crashes"
after file ``--keep`` filled: the checkpoint holds that file's end time, ``abort`` exists, and the
newest file is already gone. Measured, each in a fresh process:

* full:      ``rocketidx build --in-process`` of the whole store, same sizes, one window;
* backfill:  ``run_backfill`` with the in-process builder, timed per phase (plan = verification of the
             kept files + counting the range; build; verification of the staged files; install);
* backfill-spark: the same with the Spark builder on ``local[2]`` (``--no-spark`` skips it).

Every backfilled index is checked to answer like the full rebuild (its files for the rebuilt range
byte-identical). Results go to stdout and ``bench-data/results-backfill.json``.

Usage: ``python bench/speed/bench_backfill.py [--hash-slots N] [--index-num N] [--keep K] [--no-spark]``.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench-data"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "speed"))


def _config(slots: int, items: int):
    from rocketidx.config import BuildConfig
    return BuildConfig(hash_slot_num=slots, index_num=items, window_ms=0, timezone="UTC")


def run_full(store: str, out: str, slots: int, items: int) -> dict:
    from rocketidx.build.in_process import build_index
    t0 = time.perf_counter()
    manifest, s = build_index(Path(store) / "commitlog", out, _config(slots, items))
    return {"wall_s": time.perf_counter() - t0, "bytes": s.bytes_read, "entries": s.entries,
            "files": [f["name"] for f in manifest["files"]],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_backfill_child(store: str, engine: str) -> dict:
    import rocketidx.backfill.index as B
    phases: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    B.make_plan = timed("plan", B.make_plan)
    B._verify_staged = timed("verify_staged", B._verify_staged)
    builder = None
    if engine == "spark":
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from rocketidx.spark.build import build_index_spark
        builder = build_index_spark
    else:
        from rocketidx.build.in_process import build_index
        builder = build_index
    t0 = time.perf_counter()
    result = B.run_backfill(store, builder=timed("build", builder), log=lambda *_: None)
    wall = time.perf_counter() - t0
    phases["install_and_rest"] = wall - sum(phases.values())
    return {"wall_s": wall, "phases": {k: round(v, 2) for k, v in phases.items()},
            "installed": result.installed, "messages_in_range": result.plan.messages_in_range,
            "rebuild_from": result.plan.rebuild_from, "rebuild_to": result.plan.rebuild_to,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def crashed_copy(full: Path, store: Path, dest: Path, files: list[str], keep: int, slots: int, items: int) -> None:
    """``dest``: the store's CommitLog (hard links) and the broker's index as a crash left it."""
    from rocketidx.broker.store import write_checkpoint_index_ts
    from rocketidx.index.reader import IndexFile
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "commitlog").mkdir(parents=True)
    for seg in (store / "commitlog").iterdir():
        os.link(seg, dest / "commitlog" / seg.name)
    (dest / "index").mkdir()
    for name in files[:-1]:  # the broker already deleted the newest file
        shutil.copy(full / "index" / name, dest / "index" / name)
    (dest / "checkpoint").write_bytes(bytes(4096))
    (dest / "lock").touch()
    (dest / "abort").touch()
    kept = IndexFile(dest / "index" / files[keep - 1], slots, items)
    write_checkpoint_index_ts(dest, kept.header.end_timestamp)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hash-slots", type=int, default=500_000)
    ap.add_argument("--index-num", type=int, default=1_000_000)
    ap.add_argument("--keep", type=int, default=3, help="index files the crash leaves valid")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--child", nargs="+")
    a = ap.parse_args(argv)
    if a.child:
        kind = a.child[0]
        r = run_full(*a.child[1:3], int(a.child[3]), int(a.child[4])) if kind == "full" else \
            run_backfill_child(a.child[1], a.child[2])
        print(json.dumps(r))
        return 0
    from bench import ensure_store, warm_page_cache
    store = ensure_store(2_500_000)
    warm_page_cache(store)
    full = DATA / "backfill-full"
    shutil.rmtree(full, ignore_errors=True)
    print(f"full rebuild of {store} ...", flush=True)
    r_full = _child(["full", str(store), str(full), str(a.hash_slots), str(a.index_num)])
    mb = r_full["bytes"] / 1e6
    print(f"  full      {r_full['wall_s']:6.1f}s  {mb / r_full['wall_s']:5.0f} MB/s  {len(r_full['files'])} files  "
          f"peak RSS {r_full['peak_rss_mb']:.0f} MB", flush=True)
    results = {"store": str(store), "bytes": r_full["bytes"], "full": r_full}
    for engine in ["core"] + ([] if a.no_spark else ["spark"]):
        crashed = DATA / f"backfill-{engine}"
        crashed_copy(full, store, crashed, r_full["files"], a.keep, a.hash_slots, a.index_num)
        print(f"backfill ({engine}) of a crash after file {a.keep} of {len(r_full['files'])} ...", flush=True)
        r = _child(["backfill", str(crashed), engine])
        same = all(filecmp.cmp(full / "index" / n, crashed / "index" / n, shallow=False) for n in r_full["files"])
        r["identical_to_full"] = same and sorted(os.listdir(crashed / "index")) == sorted(r_full["files"])
        results[f"backfill_{engine}"] = r
        span = (r["rebuild_to"] - r["rebuild_from"]) / 1e6
        print(f"  backfill  {r['wall_s']:6.1f}s  ({r['wall_s'] / r_full['wall_s']:.2f}x the full rebuild)  "
              f"range {span:.0f} MB, {r['messages_in_range']:,} messages  phases {r['phases']}  "
              f"peak RSS {r['peak_rss_mb']:.0f} MB  files identical to the full rebuild: {r['identical_to_full']}",
              flush=True)
        shutil.rmtree(crashed, ignore_errors=True)
    shutil.rmtree(full, ignore_errors=True)
    (DATA / "results-backfill.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
