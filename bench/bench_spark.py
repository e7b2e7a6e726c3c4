"""``make bench``, Spark part: the end-to-end Spark build against the in-process core on one big store.

Generates (once) ``bench-data/store-4g``: 8,000,000 messages of about 700 bytes (540-byte bodies), each
with a UNIQ_KEY and 1-2 KEYS, over 24 hours, in 1 GiB segments (about 5.7 GB of CommitLog). Then, each
in a fresh process:

* core:   ``rocketidx.build.build_index`` in one Python process (the in-process reference);
* spark:  ``build_index_spark`` on ``local[N]`` (default 2), 128 MiB splits, one writer partition per
          core; wall time with and without starting the JVM, peak RSS of every Python worker (each
          worker's own ``ru_maxrss``, reported back through the manifest rows).

Both use the defaults: 5,000,000 slots / 20,000,000 items, 1-hour windows, CRC checked, zone UTC. The
two outputs are compared byte for byte. Targets (the issue): Spark >= 1.5x the in-process MB/s and
>= 300 MB/s; peak RSS per Python worker < 1 GiB. Results go to stdout and
``bench-data/results-spark.json``.

Usage: ``python bench/bench_spark.py [--messages N] [--master local[2]] [--only core,spark] [--repeat 2]
[--keep]``. The Spark build runs ``--repeat`` times in one session: the first (reported as the result)
includes the session's one-time Python start-up, the others show a long-lived session.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench.warm_page_cache
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench-data"
MESSAGES = 8_000_000
TARGET_MBPS = 300
TARGET_SPEEDUP = 1.5
TARGET_RSS_MB = 1024


def ensure_store(messages: int) -> Path:
    from rocketidx.generate import GenConfig, generate_store
    store = DATA / ("store-4g" if messages == MESSAGES else f"store-spark-{messages}")
    cfg = GenConfig(messages=messages, segment_bytes=1 << 30, body_bytes=540, span_ms=24 * 3_600_000)
    marker = store / "generator.json"
    if marker.exists() and json.loads(marker.read_text()).get("config", {}).get("messages") == messages:
        return store
    print(f"generating {messages:,} messages into {store} (once; several minutes) ...", flush=True)
    t0 = time.monotonic()
    generate_store(store, cfg)
    print(f"  done in {time.monotonic() - t0:.0f}s", flush=True)
    return store


def _config():
    from rocketidx.config import BuildConfig
    return BuildConfig(timezone="UTC")


def run_core(store: str, out: str) -> dict:
    from rocketidx.build import build_index
    t0 = time.perf_counter()
    _, s = build_index(store, out, _config())
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "bytes": s.bytes_read, "messages": s.messages, "entries": s.entries,
            "files": s.files, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_spark(store: str, out: str, master: str, split_bytes: int, partitions: int | None, repeat: int = 2) -> dict:
    """The Spark build ``repeat`` times in one session: the first pays the session's one-time Python
    start-up (planner processes, worker imports), the others show the steady state of a long-lived
    session. ``wall_s`` is the first run's; ``warm_wall_s`` the best of the others."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from rocketidx.spark.pipeline import build_index_spark
    from rocketidx.spark.session import get_session, load_spark_settings
    t0 = time.perf_counter()
    settings = load_spark_settings(ROOT / "conf" / "spark.json")
    conf = dict(settings.conf, **{"spark.ui.showConsoleProgress": "false", "spark.shuffle.compress": os.environ.get("RS_SHUFFLE_COMPRESS", "true")})
    spark = get_session(master, conf)
    t_session = time.perf_counter() - t0
    walls, runs = [], []
    for _ in range(max(1, repeat)):
        stats: dict = {}
        cpu_before = _jvm_cpu_s(spark) or 0.0
        t1 = time.perf_counter()
        _, s = build_index_spark(store, out, _config(), spark=spark, split_bytes=split_bytes,
                                 shuffle_partitions=partitions, stats=stats)
        walls.append(time.perf_counter() - t1)
        jvm = _jvm_cpu_s(spark)
        stats["jvm_cpu_s"] = None if jvm is None else round(jvm - cpu_before, 2)
        runs.append(stats)
        if len(walls) == 1:
            wall_with_session = time.perf_counter() - t0
    spark.stop()
    return {"wall_s": walls[0], "warm_wall_s": min(walls[1:]) if len(walls) > 1 else None,
            "wall_with_session_s": wall_with_session, "session_s": t_session,
            "bytes": s.bytes_read, "messages": s.messages, "entries": s.entries, "files": s.files,
            "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            **runs[0], "runs": runs,
            "peak_worker_rss_mb": max(r["peak_worker_rss_mb"] for r in runs)}


def _jvm_cpu_s(spark) -> float | None:
    """Executor CPU time of every stage so far, from Spark's REST API (None without the UI)."""
    import urllib.request
    url = spark.sparkContext.uiWebUrl
    if not url:
        return None
    with urllib.request.urlopen(f"{url}/api/v1/applications/{spark.sparkContext.applicationId}/stages") as r:
        stages = json.load(r)
    return round(sum(st.get("executorCpuTime", 0) for st in stages) / 1e9, 2)


def _child(argv: list[str]) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", *argv], capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"benchmark child {argv[0]} failed")
    return json.loads(p.stdout.strip().splitlines()[-1])


def same_output(a: Path, b: Path) -> bool:
    ma, mb = (json.loads((d / "_manifest.json").read_text()) for d in (a, b))
    names = sorted(os.listdir(a / "index"))
    return (ma == mb and names == sorted(os.listdir(b / "index"))
            and all(filecmp.cmp(a / "index" / n, b / "index" / n, shallow=False) for n in names))


def _line(label: str, r: dict) -> str:
    w = r["wall_s"]
    return (f"  {label:8s} {w:7.2f}s  {r['bytes'] / 1e6 / w:6.0f} MB/s  {r['messages'] / w / 1e6:5.2f} M messages/s  "
            f"{r['entries'] / w / 1e6:5.2f} M entries/s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=MESSAGES)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--split-bytes", type=int, default=128 * 1024**2)
    ap.add_argument("--partitions", type=int, default=None, help="writer partitions (default: cores)")
    ap.add_argument("--only", default="core,spark")
    ap.add_argument("--repeat", type=int, default=2, help="Spark builds in one session (first = cold)")
    ap.add_argument("--keep", action="store_true", help="keep the two outputs")
    ap.add_argument("--child", nargs="+")
    a = ap.parse_args(argv)
    if a.child:
        kind, store, out = a.child[:3]
        r = run_core(store, out) if kind == "core" else run_spark(
            store, out, a.child[3], int(a.child[4]), int(a.child[5]) or None, int(a.child[6]))
        print(json.dumps(r))
        return 0
    from bench import warm_page_cache
    store = ensure_store(a.messages)
    outs = {"core": DATA / "out-core", "spark": DATA / "out-spark"}
    results: dict = {"store": str(store), "master": a.master, "split_bytes": a.split_bytes}
    for kind in a.only.split(","):
        shutil.rmtree(outs[kind], ignore_errors=True)
        print(f"measuring {kind} build of {store} ...", flush=True)
        warm_page_cache(store)  # both builds read from memory: the figures are CPU, not the disk
        args = [kind, str(store), str(outs[kind])]
        if kind == "spark":
            args += [a.master, str(a.split_bytes), str(a.partitions or 0), str(a.repeat)]
        results[kind] = r = _child(args)
        print(_line(kind, r), flush=True)
        if kind == "core":
            print(f"           peak RSS {r['peak_rss_mb']:.0f} MB (one process); host load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
        else:
            print(f"           {r['splits']} splits, {r['partitions']} writer partitions; with JVM start "
                  f"{r['wall_with_session_s']:.2f}s; peak RSS per Python worker {r['peak_worker_rss_mb']:.0f} MB, "
                  f"driver {r['driver_peak_rss_mb']:.0f} MB", flush=True)
            print(f"           CPU: Python read {r['python_read_cpu_s']:.1f}s, Python write {r['python_write_cpu_s']:.1f}s, "
                  f"JVM executors {r['jvm_cpu_s']}s; host load average {os.getloadavg()[0]:.1f}", flush=True)
            if r.get("warm_wall_s"):
                print(_line("warm", dict(r, wall_s=r["warm_wall_s"])) + "   (again in the same session)", flush=True)
    if "core" in results and "spark" in results:
        core_mbps = results["core"]["bytes"] / 1e6 / results["core"]["wall_s"]
        spark_mbps = results["spark"]["bytes"] / 1e6 / results["spark"]["wall_s"]
        results["speedup"] = round(spark_mbps / core_mbps, 2)
        warm = results["spark"].get("warm_wall_s")
        if warm:
            results["warm_speedup"] = round(results["spark"]["bytes"] / 1e6 / warm / core_mbps, 2)
        results["identical"] = same_output(outs["core"], outs["spark"])
        rss = results["spark"]["peak_worker_rss_mb"]
        print(f"  spark/core {results['speedup']:.2f}x, warm {results.get('warm_speedup', 0):.2f}x "
              f"(target >= {TARGET_SPEEDUP}x); spark {spark_mbps:.0f} MB/s (target >= {TARGET_MBPS}); "
              f"worker RSS {rss:.0f} MB (target < {TARGET_RSS_MB}); outputs byte-identical: {results['identical']}",
              flush=True)
    if not a.keep:
        for d in outs.values():
            shutil.rmtree(d, ignore_errors=True)
    DATA.mkdir(exist_ok=True)
    (DATA / "results-spark.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
