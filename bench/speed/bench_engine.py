"""``make bench``, engine part: the Spark build against the in-process core, whole processes, the issue's
stores, and where the two meet (the break-even in ``conf/spark.json``).

Stores (generated once into ``bench-data/``):
* ``store-6m``: ``gen --messages 6000000 --body-bytes 500 --keys-per-message 2 --span 24h --seed 7`` (4.1 GB);
* ``store-1g``: bench.py's 1.79 GB store (2.5 M messages in 1 GiB segments);
* ``demo``: ``make run``'s 141 MB sample;
* ``store-6m-hot``, ``store-6m-q64``: store-6m's shape in one topic, with one queue and with 64 (issue 22).

Every figure is the median of ``--repeat`` runs (default 3), each Spark run paired with an in-process run
in the same loop, page cache warm, 1 h windows, default sizes, ``local[2]``. Whole-process CPU is counted
over every process the command starts (driver, JVM, Python workers, orphans too: this script is their
child subreaper and reaps them), less what a bare local session costs to start, run one SQL and one
Python job, and stop (measured here the same way).

Results go to stdout and ``bench-data/results-engine.json``. Usage:
``python bench/speed/bench_engine.py [--repeat 3] [--only e2e,warm,cpu,scale,slice,demo,cq,cqspark]``.
"""
from __future__ import annotations

import argparse
import ctypes
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
PY = sys.executable
CLI = [PY, "-m", "rocketidx"]
ENV = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY)

STORES = {
    "store-6m": dict(messages=6_000_000, body_bytes=500, keys_per_message=2, span_ms=24 * 3_600_000, seed=7),
    "store-1g": dict(messages=2_500_000, segment_bytes=1 << 30, body_bytes=540, keys_per_message=2,
                     span_ms=24 * 3_600_000, seed=7),
    "demo": dict(messages=300_000, segment_bytes=64 * 1024**2, span_ms=6 * 3_600_000),
    # store-6m's shape with every message in one queue, and the same messages over 64 queues (issue 22)
    "store-6m-hot": dict(messages=6_000_000, body_bytes=500, keys_per_message=2, span_ms=24 * 3_600_000, seed=7,
                         topics=1, queues=1),
    "store-6m-q64": dict(messages=6_000_000, body_bytes=500, keys_per_message=2, span_ms=24 * 3_600_000, seed=7,
                         topics=1, queues=64),
}


def same_sparse_bytes(a: Path, b: Path) -> bool:
    """Whether two local files hold the same bytes, reading only where either holds data: an output's IndexFiles
    are mostly hole (store-6m's: 0.76 GB written of 9.8 GB), and ``filecmp`` reading the holes fills the page
    cache with zeros, evicting the store the next timed build reads."""
    from rocketidx.storage import data_spans
    if a.stat().st_size != b.stat().st_size:
        return False
    size = a.stat().st_size
    with open(a, "rb") as fa, open(b, "rb") as fb:
        spans = [*(data_spans(fa.fileno(), size) or [(0, size)]), *(data_spans(fb.fileno(), size) or [(0, size)])]
        for lo, hi in sorted(spans):
            for at in range(lo, hi, 8 << 20):
                n = min(8 << 20, hi - at)
                if os.pread(fa.fileno(), n, at) != os.pread(fb.fileno(), n, at):
                    return False
    return True


def same_outputs(a: Path, b: Path, skip: tuple[str, ...] = ()) -> bool:
    """Two outputs' committed files (``current``; the version directories' names differ), byte for byte, but
    ``skip`` (file names)."""
    a, b = (a / "current").resolve(), (b / "current").resolve()
    names = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file() and p.name not in skip)
    return names == sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file() and p.name not in skip) \
        and all(same_sparse_bytes(a / n, b / n) for n in names)


def compile_package() -> None:
    """The package's bytecode, as a regular install has it: every timed process is a whole command, and where
    PYTHONDONTWRITEBYTECODE is set an editable install compiles its ~100 modules at each start (0.1 s here)."""
    import compileall
    compileall.compile_dir(str(ROOT / "rocketidx"), quiet=1)


def ensure_store(name: str) -> Path:
    from rocketidx.sample.generate import GenConfig, generate_store
    store = DATA / name
    cfg = GenConfig(**STORES[name])
    marker = store / "generator.json"
    from rocketidx.sample.generate import same_store
    if same_store(marker, cfg):
        return store
    print(f"generating {name} (once) ...", flush=True)
    generate_store(store, cfg)
    return store


def warm(store: Path) -> None:
    for p in sorted((store / "commitlog").iterdir()):
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass


# --- whole-process measurement ------------------------------------------------------------------

def _subreaper() -> None:
    """Orphans (a JVM or Python worker outliving its parent) are reparented here and counted."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _children_cpu() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measured(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of every descendant, stdout) of a command."""
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    while True:  # reap orphans; their CPU joins RUSAGE_CHILDREN once waited for
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {p.stderr[-2000:]}")
    return wall, _children_cpu() - cpu0, p.stdout


def build(store: Path, out: Path, *engine: str, extra: tuple[str, ...] = ()) -> tuple[float, float, dict]:
    shutil.rmtree(out, ignore_errors=True)
    wall, cpu, stdout = measured(CLI + ["build", "--commitlog", str(store), "--out", str(out), "--timezone", "UTC",
                                        "--json", *engine, *extra])
    return wall, cpu, json.loads(stdout.strip().splitlines()[-1])


BARE = """
import os, sys
from pyspark.sql import SparkSession
s = SparkSession.builder.master("local[2]").getOrCreate()
s.sql("select 1").collect()
s.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()
s.stop()
"""


def med(xs):
    return round(statistics.median(xs), 3)


# --- the measurements -------------------------------------------------------------------------

def e2e(repeat: int, results: dict) -> None:
    for name in ("store-6m", "store-1g"):
        store = ensure_store(name)
        warm(store)
        rows = []
        for _ in range(repeat):
            ip = build(store, DATA / "eng-ip", "--in-process")
            sp = build(store, DATA / "eng-sp", "--master", "local[2]")
            rows.append((ip, sp))
        ip_wall, sp_wall = med([r[0][0] for r in rows]), med([r[1][0] for r in rows])
        ip_cpu, sp_cpu = med([r[0][1] for r in rows]), med([r[1][1] for r in rows])
        bytes_read = rows[0][0][2]["bytes_read"]
        spark = rows[-1][1][2]["spark"]
        results[f"e2e {name}"] = r = {
            "bytes": bytes_read, "in_process_wall_s": ip_wall, "spark_wall_s": sp_wall,
            "in_process_MBps": round(bytes_read / 1e6 / ip_wall), "spark_MBps": round(bytes_read / 1e6 / sp_wall),
            "spark_over_in_process": round(sp_wall / ip_wall, 2), "in_process_cpu_s": ip_cpu, "spark_cpu_s": sp_cpu,
            "spark_timeline": {k: spark.get(k) for k in ("session_s", "plan_s", "job_s", "commit_s", "stop_s")},
            "peak_worker_rss_mb": spark.get("peak_worker_rss_mb"), "mode": spark.get("mode"),
            "driver_peak_rss_mb": rows[-1][1][2].get("driver_peak_rss_mb")}
        print(f"  {name}: in process {ip_wall:.2f}s ({r['in_process_MBps']} MB/s), Spark whole process "
              f"{sp_wall:.2f}s ({r['spark_MBps']} MB/s) = {r['spark_over_in_process']}x; CPU {ip_cpu:.1f} vs "
              f"{sp_cpu:.1f} s; Spark timeline {r['spark_timeline']}; peak RSS Python worker "
              f"{r['peak_worker_rss_mb']} MB, driver {r['driver_peak_rss_mb']} MB", flush=True)


def cpu(repeat: int, results: dict) -> None:
    bare = [measured([PY, "-c", BARE]) for _ in range(repeat)]
    bare_cpu, bare_wall = med([b[1] for b in bare]), med([b[0] for b in bare])
    r = results.get("e2e store-6m")
    results["bare session"] = {"wall_s": bare_wall, "cpu_s": bare_cpu}
    line = f"  bare local[2] session (start, one SQL, one Python job, stop): {bare_wall:.2f}s wall, {bare_cpu:.1f} CPU-s"
    if r:
        ratio = round((r["spark_cpu_s"] - bare_cpu) / r["in_process_cpu_s"], 2)
        whole = round(r["spark_cpu_s"] / r["in_process_cpu_s"], 2)
        results["cpu store-6m"] = {"spark_less_bare_over_in_process": ratio, "spark_over_in_process": whole}
        line += (f"; store-6m Spark build CPU less that / in-process CPU = {ratio} (target <= 1.3); "
                 f"without subtracting anything {whole}")
    print(line, flush=True)


SESSION_SCRIPT = """
import json, os, shutil, sys, time
sys.path.insert(0, {root!r})
from rocketidx.config import BuildConfig
from rocketidx.spark.build import build_index_spark
from rocketidx.spark.session import get_session, load_spark_settings
settings = load_spark_settings({conf!r}, master={master!r})
spark = get_session({master!r}, settings.conf, sources=False)
runs = []
for i in range({n}):
    shutil.rmtree({out!r}, ignore_errors=True)
    stats = {{}}
    t = time.perf_counter()
    build_index_spark({store!r}, {out!r}, BuildConfig(timezone="UTC"), spark=spark, stats=stats)
    runs.append(dict(stats, wall_s=time.perf_counter() - t))
spark.stop()
print(json.dumps(runs))
"""


def in_session(store: Path, master: str, n: int) -> list[dict]:
    script = SESSION_SCRIPT.format(root=str(ROOT), conf=str(ROOT / "conf" / "spark.json"), master=master, n=n,
                                   out=str(DATA / "eng-session"), store=str(store))
    _, _, stdout = measured([PY, "-c", script])
    return json.loads(stdout.strip().splitlines()[-1])


def warm_builds(repeat: int, results: dict) -> None:
    store = ensure_store("store-6m")
    warm(store)
    seconds, ips = [], []
    for _ in range(repeat):
        runs = in_session(store, "local[2]", 2)
        seconds.append(runs[1]["wall_s"])
        ips.append(build(store, DATA / "eng-ip", "--in-process")[0])
    r = results["warm store-6m"] = {"second_build_s": med(seconds), "in_process_wall_s": med(ips),
                                    "speedup": round(med(ips) / med(seconds), 2)}
    print(f"  store-6m, a second build in the same session: {r['second_build_s']:.2f}s vs in process "
          f"{r['in_process_wall_s']:.2f}s = {r['speedup']}x (target >= 1.4)", flush=True)


def scale(repeat: int, results: dict) -> None:
    store = ensure_store("store-6m")
    warm(store)
    one, two = [], []
    for _ in range(repeat):
        one.append(in_session(store, "local-cluster[1,1,2048]", 1)[0]["job_s"])
        two.append(in_session(store, "local-cluster[2,1,2048]", 1)[0]["job_s"])
    r = results["scale store-6m"] = {"one_executor_job_s": med(one), "two_executors_job_s": med(two),
                                     "ratio": round(med(two) / med(one), 2)}
    print(f"  store-6m build job on local-cluster: 1 executor {r['one_executor_job_s']:.2f}s, 2 executors "
          f"{r['two_executors_job_s']:.2f}s = {r['ratio']}x (target <= 0.6)", flush=True)


def _slice_bytes(store: Path, lo: int, hi: int) -> int:
    """The bytes of the records stored in [lo, hi), by a structure-only walk of the whole log."""

    import rocketidx.layout as L
    from rocketidx.commitlog.records import release_pages, scan_records
    from rocketidx.commitlog.segments import list_segments, open_segment
    total = 0
    for seg in list_segments(store / "commitlog"):
        buf = open_segment(seg)
        for recs in scan_records(buf, seg, 0, seg.size, check_crc=False):
            ts = recs[:, L.REC_STORE_TS]
            total += int(recs[(ts >= lo) & (ts < hi), L.REC_TOTAL].sum())
        release_pages(buf, 0, seg.size)
    return total


def time_slice(repeat: int, results: dict) -> None:
    """A 1-hour --from-time/--to-time slice: the bytes the reader went through against the slice's own
    bytes, with the sparse time index a whole build keeps (written here by ``rocketidx timeindex``)."""
    store = ensure_store("store-6m")
    warm(store)
    start = STORES["store-6m"].get("start_ms", 1_700_000_000_000) + 12 * 3_600_000
    extra = ("--from-time", str(start), "--to-time", str(start + 3_600_000))
    tix = DATA / "eng-timeindex"
    shutil.rmtree(tix, ignore_errors=True)
    t_index, _, _ = measured(CLI + ["timeindex", "--commitlog", str(store), "--out", str(tix)])
    slice_bytes = _slice_bytes(store, start, start + 3_600_000)
    with_index = extra + ("--time-index", str(tix))
    runs_ip, runs_sp = [], []
    for _ in range(repeat):
        runs_ip.append(build(store, DATA / "eng-slice-ip", "--in-process", extra=with_index))
        runs_sp.append(build(store, DATA / "eng-slice", "--master", "local[2]", extra=with_index))
    no_index = build(store, DATA / "eng-slice-ip", "--in-process", extra=extra + ("--time-index", "none"))
    sp, ip = runs_sp[-1][2], runs_ip[-1][2]
    assert sp["messages"] == ip["messages"] == no_index[2]["messages"], "a slice must not change the result"
    r = results["slice store-6m"] = {
        "slice_bytes": slice_bytes, "log_bytes": sp["bytes_read"], "timeindex_command_s": t_index,
        "spark": {"wall_s": med([x[0] for x in runs_sp]), "bytes_scanned": sp["bytes_scanned"],
                  "time_index": sp["time_index"], "read_over_slice": round(sp["bytes_scanned"] / slice_bytes, 2)},
        "in_process": {"wall_s": med([x[0] for x in runs_ip]), "bytes_scanned": ip["bytes_scanned"],
                       "read_over_slice": round(ip["bytes_scanned"] / slice_bytes, 2)},
        "in_process_no_index": {"wall_s": no_index[0], "bytes_scanned": no_index[2]["bytes_scanned"]}}
    print(f"  store-6m, a 1-hour slice ({slice_bytes:,} bytes of records): the time index "
          f"({t_index:.2f}s to write by itself) lets Spark read {sp['bytes_scanned']:,} bytes = "
          f"{r['spark']['read_over_slice']}x (target <= 2) in {r['spark']['wall_s']:.2f}s whole process; "
          f"in process {r['in_process']['read_over_slice']}x in {r['in_process']['wall_s']:.2f}s; "
          f"without the index {no_index[2]['bytes_scanned']:,} bytes in {no_index[0]:.2f}s", flush=True)


def demo(repeat: int, results: dict) -> None:
    store = ensure_store("demo")
    warm(store)
    auto, ip = [], []
    for _ in range(repeat):
        ip.append(build(store, DATA / "eng-demo-ip", "--in-process")[0])
        w, _, out = build(store, DATA / "eng-demo", extra=())
        auto.append(w)
        engine = out["engine"]
    r = results["demo build"] = {"in_process_s": med(ip), "no_flags_s": med(auto), "engine": engine,
                                 "ratio": round(med(auto) / med(ip), 2)}
    print(f"  demo store, build without engine flags: {r['no_flags_s']:.2f}s ({engine['name']}) vs in process "
          f"{r['in_process_s']:.2f}s = {r['ratio']}x (target <= 2)", flush=True)
    stats = CLI + ["stats", "--index", str(DATA / "eng-demo"), "--json"]
    t, t_ip = [], []
    for _ in range(repeat):
        t_ip.append(measured(stats + ["--in-process"])[0])
        wall, _, out = measured(stats)
        t.append(wall)
        engine = json.loads(out.strip().splitlines()[-1])["engine"]
    r = results["demo stats"] = {"no_flags_s": med(t), "in_process_s": med(t_ip), "engine": engine,
                                 "ratio": round(med(t) / med(t_ip), 2)}
    print(f"  demo store, stats without engine flags: {r['no_flags_s']:.2f}s ({engine['name']}) vs in process "
          f"{r['in_process_s']:.2f}s = {r['ratio']}x (target <= 2)", flush=True)


def break_even(results: dict) -> None:
    """Where the Spark whole process meets the in-process build, from the e2e figures: both grow linearly
    with bytes, so the meeting point is fixed cost / (in-process s per byte - Spark s per byte)."""
    a, b = results.get("e2e store-1g"), results.get("e2e store-6m")
    if not (a and b):
        return
    ip_rate = (b["in_process_wall_s"] - a["in_process_wall_s"]) / (b["bytes"] - a["bytes"])
    sp_rate = (b["spark_wall_s"] - a["spark_wall_s"]) / (b["bytes"] - a["bytes"])
    sp_fixed = b["spark_wall_s"] - sp_rate * b["bytes"]
    ip_fixed = b["in_process_wall_s"] - ip_rate * b["bytes"]
    meet = (sp_fixed - ip_fixed) / (ip_rate - sp_rate) if ip_rate > sp_rate else None
    results["break_even_bytes"] = meet and int(meet)
    print(f"  break-even (Spark local[2] whole process = in process): "
          f"{'never' if meet is None else f'{meet / 1024**3:.1f} GiB'}; conf/spark.json has "
          f"{json.loads((ROOT / 'conf' / 'spark.json').read_text()).get('engine_break_even')}", flush=True)


def consumequeues(repeat: int, results: dict) -> None:
    """ConsumeQueues in process on store-6m: ``--targets consumequeue`` alone (MB/s, whole process), and
    ``--targets index,consumequeue`` against ``--targets index`` (one read feeding both). Targets (issue 22):
    at least 600 MB/s; both at most 1.3x the index alone."""
    store = ensure_store("store-6m")
    warm(store)
    rows = []
    for _ in range(repeat):
        rows.append(tuple(build(store, DATA / "eng-cq", "--in-process", extra=("--targets", t))
                          for t in ("consumequeue", "index", "index,consumequeue")))
    cq, ix, both = (med([r[i][0] for r in rows]) for i in range(3))
    bytes_read = rows[0][0][2]["bytes_read"]
    results["consumequeue store-6m"] = r = {
        "consumequeue_wall_s": cq, "consumequeue_MBps": round(bytes_read / 1e6 / cq), "index_wall_s": ix,
        "index_and_consumequeue_wall_s": both, "both_over_index": round(both / ix, 2),
        "queues": len((rows[0][0][2].get("consumequeue") or {}).get("queues", []))}
    print(f"  store-6m: --targets consumequeue {cq:.2f}s ({r['consumequeue_MBps']} MB/s, target >= 600); "
          f"index {ix:.2f}s, index,consumequeue {both:.2f}s = {r['both_over_index']}x (target <= 1.3)", flush=True)


def consumequeues_spark(repeat: int, results: dict) -> None:
    """ConsumeQueues on ``local[2]``, whole process: ``--targets consumequeue`` on store-6m (target: at least
    350 MB/s), and a hot-queue store (one topic, one queue) against the same messages over 64 queues (target:
    the hot store at most 1.5x; every Python worker's peak RSS under 1 GiB in both)."""
    for name in ("store-6m", "store-6m-hot", "store-6m-q64"):
        store = ensure_store(name)
        warm(store)
        runs = [build(store, DATA / "eng-cq-spark", "--master", "local[2]", extra=("--targets", "consumequeue"))
                for _ in range(repeat)]
        wall = med([r[0] for r in runs])
        report = runs[0][2]
        rss = max(max(r[2]["spark"]["peak_worker_rss_mb"], r[2]["spark"]["consumequeue"]["peak_worker_rss_mb"])
                  for r in runs)
        results[f"consumequeue local[2] {name}"] = r = {
            "wall_s": wall, "MBps": round(report["bytes_read"] / 1e6 / wall), "queues":
            len(report["consumequeue"]["queues"]), "peak_worker_rss_mb": rss,
            "splits": report["spark"]["consumequeue"]["splits"], "cpu_s": med([r[1] for r in runs])}
        print(f"  {name}: local[2] --targets consumequeue {wall:.2f}s ({r['MBps']} MB/s), {r['queues']} queues, "
              f"peak worker RSS {rss:.0f} MB", flush=True)
    hot, q64 = results["consumequeue local[2] store-6m-hot"], results["consumequeue local[2] store-6m-q64"]
    results["consumequeue hot over 64 queues"] = ratio = round(hot["wall_s"] / q64["wall_s"], 2)
    print(f"  one hot queue / 64 queues: {ratio}x (target <= 1.5); store-6m "
          f"{results['consumequeue local[2] store-6m']['MBps']} MB/s (target >= 350)", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="e2e,cpu,warm,scale,slice,demo,cq,cqspark")
    a = ap.parse_args(argv)
    _subreaper()
    DATA.mkdir(exist_ok=True)
    results: dict = {}
    steps = {"e2e": e2e, "cpu": cpu, "warm": warm_builds, "scale": scale, "slice": time_slice, "demo": demo,
             "cq": consumequeues, "cqspark": consumequeues_spark}
    for name in a.only.split(","):
        print(f"measuring {name} ...", flush=True)
        try:
            steps[name](a.repeat, results)
        except Exception as e:  # one failed measurement must not hide the others
            print(f"  {name} failed: {e}", flush=True)
            results[name] = {"error": str(e)}
    break_even(results)
    (DATA / "results-engine.json").write_text(json.dumps(results, indent=2) + "\n")
    for p in DATA.glob("eng-*"):
        shutil.rmtree(p, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
