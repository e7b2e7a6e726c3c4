"""Index statistics versus building the index: wall times on one generated store.

The store: ``bench-data/store-4g`` (8 million messages, ~5.7 GB of CommitLog in 1 GiB segments, 24 hours;
the Spark bench generates it) when present, else ``bench-data/store-<N>`` generated here with ``--messages``
(default 2,000,000) in the same shape. Each measurement runs in a fresh Python process, one after the other:

* build:        ``rocketidx build --in-process`` (default sizes, 1-hour windows, UTC) -> ``bench-data/stats-out-*``
* spark build:  :func:`rocketidx.spark.build.build_index_spark` of the same store (``--no-spark-build``
                skips it), Spark session start included
* stats:        :func:`rocketidx.spark.stats.index_stats` of that output plus every table as pandas and
                the summary; Spark session start included, and reported apart
* stats + CommitLog: the same with the CommitLog (topics, key strings, true collisions)

The issue's bar: stats within 2x the build time. Results go to stdout and ``bench-data/results-stats.json``.
Usage: ``python bench/speed/bench_stats.py [--store DIR] [--messages N] [--no-spark-build] [--master local[*]]``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench.warm_page_cache
ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench-data"

_STATS = r"""
import json, resource, sys, time
t0 = time.monotonic()
from rocketidx.spark.session import get_session
spark = get_session(sys.argv[1], {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
                    log_level="ERROR")
spark.range(1).count()  # the JVM and its first task: what any Spark command pays once
t1 = time.monotonic()
from rocketidx.spark.stats import index_stats
stats = index_stats(spark, sys.argv[2], sys.argv[3] if sys.argv[3] != "-" else None)
tables = stats.to_pandas()
summary = stats.summary()
t2 = time.monotonic()
print(json.dumps({"wall_s": t2 - t0, "session_s": t1 - t0, "compute_s": t2 - t1,
                  "rows": {k: len(v) for k, v in tables.items()}, "summary": summary,
                  "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}, default=str))
"""

_SPARK_BUILD = r"""
import json, sys, time
t0 = time.monotonic()
from rocketidx.config import BuildConfig
from rocketidx.spark.build import build_index_spark
from rocketidx.spark.session import get_session
spark = get_session(sys.argv[1], {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
                    log_level="ERROR")
manifest, summary = build_index_spark(sys.argv[2], sys.argv[3], BuildConfig(timezone="UTC"), spark=spark)
print(json.dumps({"wall_s": time.monotonic() - t0, "entries": summary.entries, "files": summary.files}))
"""


def ensure_store(store: Path | None, messages: int) -> Path:
    if store is not None:
        return store
    if (DATA / "store-4g" / "generator.json").exists():
        return DATA / "store-4g"
    from rocketidx.sample.generate import GenConfig, generate_store
    from rocketidx.sample.generate import same_store
    store = DATA / f"store-{messages}"
    cfg = GenConfig(messages=messages, segment_bytes=1 << 30, body_bytes=540, span_ms=24 * 3_600_000, seed=1)
    if not same_store(store / "generator.json", cfg):
        print(f"generating {messages:,} messages into {store} (once) ...", flush=True)
        generate_store(store, cfg)
    return store


def _run(cmd: list[str]) -> tuple[float, str]:
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return wall, p.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", type=Path, default=None)
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--no-spark-build", action="store_true")
    ap.add_argument("--no-commitlog", action="store_true", help="skip the stats run with the CommitLog")
    a = ap.parse_args(argv)
    store = ensure_store(a.store, a.messages)
    out = DATA / f"stats-out-{store.name}"
    py = sys.executable
    results: dict = {"store": str(store)}
    print(f"store {store}", flush=True)
    from bench import warm_page_cache
    warm_page_cache(store)  # every run reads from memory: the figures are CPU, not the disk
    wall, text = _run([py, "-m", "rocketidx", "build", "--in-process", "--commitlog", str(store), "--out",
                       str(out), "--timezone", "UTC", "--json"])
    summary = json.loads(text)
    results["build"] = {"wall_s": wall, "bytes_read": summary["bytes_read"], "entries": summary["entries"],
                        "files": summary["files"]}
    print(f"  build (in process)     {wall:7.1f} s  {summary['bytes_read'] / 1e9:.2f} GB read, "
          f"{summary['entries']:,} entries, {summary['files']} files", flush=True)

    if not a.no_spark_build:
        spark_out = DATA / f"stats-spark-out-{store.name}"
        wall, text = _run([py, "-c", _SPARK_BUILD, a.master, str(store), str(spark_out)])
        results["spark_build"] = json.loads(text.strip().splitlines()[-1]) | {"process_wall_s": wall}
        print(f"  build (Spark)          {wall:7.1f} s", flush=True)

    runs = [("stats", "-")] + ([] if a.no_commitlog else [("stats_commitlog", str(store))])
    for name, commitlog in runs:
        wall, text = _run([py, "-c", _STATS, a.master, str(out), commitlog])
        r = json.loads(text.strip().splitlines()[-1]) | {"process_wall_s": wall}
        results[name] = r
        print(f"  {name:22} {wall:7.1f} s  (Spark session {r['session_s']:.1f} s, statistics {r['compute_s']:.1f} s, "
              f"driver peak RSS {r['driver_peak_rss_mb']:.0f} MB)", flush=True)

    build = results["build"]["wall_s"]
    print("ratios to the in-process build (the issue's bar: <= 2):")
    for name in [n for n, _ in runs]:
        r = results[name]
        line = f"  {name:22} {r['process_wall_s'] / build:5.2f}x with session start, {r['compute_s'] / build:5.2f}x without"
        if "spark_build" in results:
            line += f"; {r['process_wall_s'] / results['spark_build']['process_wall_s']:5.2f}x the Spark build"
        print(line)
    DATA.mkdir(exist_ok=True)
    (DATA / "results-stats.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
