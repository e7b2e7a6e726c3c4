"""Incremental builds (issue 35, Must show 1): a store of 20 segments of 256 MiB, built in full, then
* grown by one segment (256 MiB new),
* its last segment grown in place (the 21st half written at the earlier build, then whole: 128 MiB new),
* its oldest segment removed by retention (windowed output: the windows it held entries of are written again),
each brought up to date by ``rocketidx build`` (incremental, the default) and, in the same run, built in full
(``--full``), whole processes, in process (``--rounds`` pairs, 3 by default, medians: this machine's times move
by a third from one build to the next) and once with ``--master local[2]``. Reports the bytes each incremental
build read (from its ``--json`` summary) against the new bytes, the wall times and their ratio (targets: bytes
at most 1.3x the new bytes plus the windows they fall in; wall at most 0.2x in process, 0.35x on local[2]),
and checks every incremental output's files against its full build's.

Usage: ``python bench/speed/bench_incremental.py [--targets index] [--skip-spark] [--rounds 3]``; results in
``bench-data/results-incremental.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import CLI, DATA, ENV, compile_package, same_outputs  # noqa: E402

SEGMENT = 256 << 20
# About 683 bytes a message (store-6m's shape): 8.3 M messages fill 21 segments of 256 MiB and start a 22nd.
STORE = dict(messages=8_300_000, segment_bytes=SEGMENT, body_bytes=500, keys_per_message=2,
             span_ms=24 * 3_600_000, seed=7)


def ensure_store() -> Path:
    from rocketidx.sample.generate import GenConfig, generate_store, same_store
    store = DATA / "store-inc"
    cfg = GenConfig(**STORE)
    if not same_store(store / "generator.json", cfg):
        print("generating store-inc (once) ...", flush=True)
        generate_store(store, cfg, replace=True)
    return store / "commitlog"


def lay(log: Path, source: Path, names: list[str], half: str | None = None) -> None:
    """``log`` holds hard links to ``names`` of ``source`` (the broker's files as they were), and ``half`` as a
    copy whose second half is zeros (a segment being written)."""
    shutil.rmtree(log, ignore_errors=True)
    log.mkdir(parents=True)
    for n in names:
        os.link(source / n, log / n)
    if half:
        data = bytearray((source / half).read_bytes())
        data[SEGMENT // 2:] = bytes(len(data) - SEGMENT // 2)
        # The cut is where a record ends: the first record starting at or after the middle begins a zero tail.
        (log / half).write_bytes(bytes(_cut_at_record(source / half, data)))


def _cut_at_record(path: Path, data: bytearray) -> bytearray:
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import Segment
    import rocketidx.layout as L
    seg = Segment(str(path), int(path.name), path.stat().st_size)
    end = 0
    for _, _, recs in CommitLogReader([seg], check_crc=False).record_chunks():
        ends = recs[:, L.REC_POS] + recs[:, L.REC_TOTAL]
        end = int(ends[ends <= SEGMENT // 2].max(initial=end))
        if int(ends[-1]) > SEGMENT // 2:
            break
    full = bytearray(path.read_bytes())
    full[end:] = bytes(len(full) - end)
    return full


def build(log: Path, out: Path, targets: str, *extra: str) -> tuple[float, dict]:
    t = time.monotonic()
    r = subprocess.run([*CLI, "build", "--commitlog", str(log), "--out", str(out), "--timezone", "UTC", "--json",
                        "--targets", targets, *extra], check=True, env=ENV, capture_output=True, text=True)
    return time.monotonic() - t, json.loads(r.stdout)


def same_files(a: Path, b: Path) -> bool:
    return same_outputs(a, b, skip=("_manifest.json",))


def warm(log: Path) -> None:
    for p in sorted(log.iterdir()):
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass


def scenario(name: str, source: Path, before: tuple[list[str], str | None], after: list[str], new_bytes: int | None,
             targets: str, spark: bool, work: Path, rounds: int = 3) -> dict:
    log, out, snap = work / "log", work / "out", work / "snap"
    for d in (out, snap):
        shutil.rmtree(d, ignore_errors=True)
    lay(log, source, *before)
    _, earlier = build(log, out, targets, "--in-process")  # last night's build
    subprocess.run(["cp", "-al", str(out), str(snap)], check=True)
    lay(log, source, after)
    warm(log)
    full_dir = work / "full"
    incs, fulls, identical = [], [], True
    for r in range(rounds):  # paired: an incremental build from last night's version, then a full build
        if r:
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run(["cp", "-al", str(snap), str(out)], check=True)
        inc_s, inc = build(log, out, targets, "--in-process")
        shutil.rmtree(full_dir, ignore_errors=True)
        full_s, full = build(log, full_dir, targets, "--in-process", "--full")
        incs.append(round(inc_s, 2))
        fulls.append(round(full_s, 2))
        identical &= same_files(out, full_dir)
    said = inc.get("incremental") or {}
    if new_bytes is None:  # the log's bytes past where last night's read ended
        new_bytes = full["bytes_read"] - earlier["bytes_read"]
    inc_s, full_s = statistics.median(incs), statistics.median(fulls)
    res: dict = {"scenario": name, "new_bytes": new_bytes}
    res.update(incremental_s=inc_s, full_s=full_s, ratio=round(inc_s / full_s, 3), incremental_rounds_s=incs,
               full_rounds_s=fulls, bytes_read=said.get("bytes_read"), windows_rebuilt=said.get("windows_rebuilt"),
               old_bytes_read=said.get("old_bytes_read", 0), files_carried=said.get("files_carried"),
               files_written=said.get("files_written"), full_bytes_read=full["bytes_read"],
               identical=identical, why=said.get("why") or said.get("full"))
    res["bytes_over_new"] = round((said.get("bytes_read") or 0) / new_bytes, 3) if new_bytes else None
    if spark:
        out2 = work / "out2"
        shutil.rmtree(out2, ignore_errors=True)
        subprocess.run(["cp", "-al", str(snap), str(out2)], check=True)
        s_inc, _ = build(log, out2, targets, "--master", "local[2]")
        shutil.rmtree(full_dir, ignore_errors=True)
        s_full, _ = build(log, full_dir, targets, "--master", "local[2]", "--full")
        res.update(spark_incremental_s=round(s_inc, 2), spark_full_s=round(s_full, 2),
                   spark_ratio=round(s_inc / s_full, 3), spark_identical=same_files(out2, full_dir))
        shutil.rmtree(out2, ignore_errors=True)
    for d in (snap, full_dir):
        shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(res), flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--targets", default="index")
    p.add_argument("--skip-spark", action="store_true", help="in process only")
    p.add_argument("--rounds", type=int, default=3, help="paired in-process rounds per scenario (medians)")
    a = p.parse_args(argv)
    compile_package()
    source = ensure_store()
    names = sorted(n for n in os.listdir(source))
    if len(names) < 21:
        raise SystemExit(f"{source}: {len(names)} segments, 21 needed")
    first20, first21 = names[:20], names[:21]
    work = DATA / "incremental-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    runs = [
        scenario("grown by one segment", source, (first20, None), first21, None, a.targets, not a.skip_spark, work,
                 a.rounds),
        scenario("last segment grew in place", source, (first21[:-1], first21[-1]), first21, None, a.targets,
                 not a.skip_spark, work, a.rounds),
        scenario("oldest segment removed", source, (first21, None), first21[1:], 0, a.targets, not a.skip_spark,
                 work, a.rounds),
    ]
    shutil.rmtree(work, ignore_errors=True)
    result = {"store": str(source), "segments": 21, "segment_bytes": SEGMENT, "targets": a.targets, "runs": runs}
    (DATA / "results-incremental.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
