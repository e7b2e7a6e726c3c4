"""``make bench``: throughput and peak memory of the core, one process per measurement.

Generates (once) a store of the brief's yardstick shape in ``bench-data/store-1g``: 2.5 million
messages of about 700 bytes (540-byte bodies), each with a UNIQ_KEY and 1-2 KEYS, over 24 hours, in
1 GiB segments (about 1.79 GB of CommitLog). Then, each in a fresh Python process so peak RSS is its own:

* parse:  CommitLog -> records -> index entries with key hashes (CRC check on)
* write:  the IndexFile writer alone, fed the store's entries (default 5,000,000 slots / 20,000,000 items)
* build:  the whole in-process build, parse + write + commit, 1-hour windows
* and the same parse and build on the numpy path (the compiled kernel switched off), for reference.

Yardstick (the brief): Apache RocketMQ's own single-threaded parse + putKey handles this shape at
about 650 MB/s, 0.92 M messages/s, 2.3 M entries/s on this machine. Targets per core: parse + build at
least that; writer alone >= 5 M entries/s; peak RSS < 1 GiB. Results go to stdout and
``bench-data/results-core.json``. Usage: ``python bench/speed/bench.py [--messages N] [--only parse,write,build]``.
"""
from __future__ import annotations

import argparse
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
YARDSTICK = {"MB/s": 650, "messages/s": 0.92e6, "entries/s": 2.3e6}


def ensure_store(messages: int) -> Path:
    from rocketidx.sample.generate import GenConfig, generate_store
    store = DATA / ("store-1g" if messages == 2_500_000 else f"store-{messages}")
    cfg = GenConfig(messages=messages, segment_bytes=1 << 30, body_bytes=540, keys_per_message=2,
                    span_ms=24 * 3_600_000, seed=7)
    marker = store / "generator.json"
    from rocketidx.sample.generate import same_store
    if same_store(marker, cfg):
        return store
    print(f"generating {messages:,} messages into {store} (once) ...", flush=True)
    t0 = time.monotonic()
    generate_store(store, cfg)
    print(f"  done in {time.monotonic() - t0:.0f}s", flush=True)
    return store


def warm_page_cache(store: Path) -> None:
    """Read the segments once so every measurement starts from the page cache, not from the disk
    (the figures are CPU throughput; a cold first read measures the disk instead)."""
    chunk = bytearray(16 << 20)
    for seg in sorted((store / "commitlog").iterdir()):
        with open(seg, "rb") as f:
            while f.readinto(chunk):
                pass


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_parse(store: str, native: bool) -> dict:
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import list_segments
    t0 = time.perf_counter()
    reader = CommitLogReader(list_segments(store), native=native)
    messages = entries = 0
    for seg, buf, recs, e in reader.entry_chunks():
        messages += len(recs)
        entries += e.num_rows
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "bytes": reader.bytes_read, "messages": messages, "entries": entries}


def measure_write(store: str, native: bool) -> dict:
    """The writer alone: the store's entries are parsed first (not timed), then written in batches."""
    from rocketidx.build.write import EntryBatch, WriterSizes, write_windows
    from rocketidx.config import BuildConfig
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import list_segments
    from rocketidx.index.windows import assign_windows
    cfg = BuildConfig(timezone="UTC")
    batches = []
    for seg, buf, recs, e in CommitLogReader(list_segments(store), native=native).entry_chunks():
        ts = e.column("store_timestamp_ms").to_numpy()
        batches.append(EntryBatch(assign_windows(ts, cfg.window_ms), e.column("phy_offset").to_numpy(),
                                  e.column("key_hash").to_numpy(), ts))
    out = DATA / "write-out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    sizes = WriterSizes(cfg.hash_slot_num, cfg.index_num, cfg.window_ms)
    files = [f for w in write_windows(batches, str(out), sizes) for f in w.files]
    wall = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return {"wall_s": wall, "entries": int(sum(len(b[1]) for b in batches)), "files": len(files)}


def measure_build(store: str, native: bool) -> dict:
    from rocketidx.build.in_process import build_index
    from rocketidx.config import BuildConfig
    out = DATA / "build-out"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    manifest, s = build_index(store, out, BuildConfig(timezone="UTC"), native=native)
    wall = time.perf_counter() - t0
    disk = sum(os.stat(p).st_blocks * 512 for p in (out / "index").iterdir())
    apparent = sum(os.stat(p).st_size for p in (out / "index").iterdir())
    shutil.rmtree(out, ignore_errors=True)
    return {"wall_s": wall, "bytes": s.bytes_read, "messages": s.messages, "entries": s.entries,
            "files": s.files, "disk_bytes": disk, "apparent_bytes": apparent}


MEASURES = {"parse": measure_parse, "write": measure_write, "build": measure_build}


def child(kind: str, store: str, native: bool) -> None:
    r = MEASURES[kind](store, native)
    r["peak_rss_mb"] = _peak_rss_mb()
    print(json.dumps(r))


def run_child(kind: str, store: Path, native: bool) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", kind, str(store), "1" if native else "0"],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=2_500_000)
    ap.add_argument("--only", default="parse,write,build")
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark benchmarks")
    ap.add_argument("--child", nargs=3, metavar=("KIND", "STORE", "NATIVE"))
    a = ap.parse_args(argv)
    if a.child:
        child(a.child[0], a.child[1], a.child[2] == "1")
        return 0
    from rocketidx.commitlog.native import native_available
    store = ensure_store(a.messages)
    paths = [True, False] if native_available() else [False]
    warm_page_cache(store)
    results = {}
    for native in paths:
        for kind in a.only.split(","):
            if kind == "write" and not native:
                continue  # the writer is numpy either way
            label = f"{kind}{'' if native else ' (numpy path)'}"
            print(f"measuring {label} ...", flush=True)
            results[label] = r = run_child(kind, store, native)
            w = r["wall_s"]
            parts = [f"{w:.2f}s"]
            if "bytes" in r:
                parts.append(f"{r['bytes'] / 1e6 / w:.0f} MB/s")
            if "messages" in r:
                parts.append(f"{r['messages'] / w / 1e6:.2f} M messages/s")
            parts.append(f"{r['entries'] / w / 1e6:.2f} M entries/s")
            parts.append(f"peak RSS {r['peak_rss_mb']:.0f} MB")
            print(f"  {label:22s} " + "  ".join(parts), flush=True)
    print(f"yardstick (RocketMQ, single thread): {YARDSTICK['MB/s']} MB/s, "
          f"{YARDSTICK['messages/s'] / 1e6:.2f} M messages/s, {YARDSTICK['entries/s'] / 1e6:.1f} M entries/s")
    DATA.mkdir(exist_ok=True)
    (DATA / "results-core.json").write_text(json.dumps(results, indent=2) + "\n")
    # The other benchmarks, each in its own process; --no-spark keeps to the core (and the core backfill).
    later = [["bench_backfill.py"] + (["--no-spark"] if a.no_spark else []), ["bench_remote.py"]]
    if not a.no_spark:
        later += [["bench_engine.py"], ["bench_stats.py"]]
    later.append(["bench_repair.py"])  # after bench_engine.py, which generates store-6m
    later.append(["bench_targets.py"])  # light queues and batch queues on top of the index (issue 34)
    later.append(["bench_workers.py"])  # the in-process engine on 2 workers against 1 (issue 35)
    later.append(["bench_incremental.py"] + (["--skip-spark"] if a.no_spark else []))  # incremental (issue 35)
    if not a.no_spark:
        later.append(["bench_cluster.py"])  # store-6m on a standalone cluster, with the archive and with the zip
    for script, *args in later:
        subprocess.run([sys.executable, str(ROOT / "bench" / "speed" / script), *args], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
