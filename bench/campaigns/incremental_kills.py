"""kill -9 at random moments of incremental builds (issue 35, Must show 2).

A store's log is laid out as the broker left it night after night: each run the log has grown (a segment
written in place, the next segment begun) or lost its oldest segment, and ``rocketidx build`` brings the output
up to date from what changed. Each run is killed with SIGKILL at a random moment of the build (nothing runs in
the killed process: no handler, no cleanup), then checked:
- ``OUT/current`` names the version committed before the run, whose every file has the bytes it had, unless the
  build had committed before the kill (then the new version must be whole and right, as below);
- the build run again, to the end, equals a full build (``--full``) of the same log, file for file.

    .venv/bin/python bench/campaigns/incremental_kills.py [--runs 20] [--seed 1] [--window 1h]

Exit 0 when every run passed. The store is generated once under bench-data/incremental-kills/.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIDX = [sys.executable, "-m", "rocketidx"]
DATA = ROOT / "bench-data" / "incremental-kills"
SEGMENT = 32 << 20


def version(out: Path) -> tuple[str | None, str | None]:
    """The committed version's name and a digest of every file in it (names and bytes)."""
    cur = out / "current"
    if not cur.is_symlink():
        return None, None
    v = out / os.readlink(cur)
    h = hashlib.sha256()
    for p in sorted(v.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(v)).encode())
            h.update(p.read_bytes())
    return v.name, h.hexdigest()


def files(out: Path) -> dict[str, bytes]:
    v = (out / "current").resolve()
    return {str(p.relative_to(v)): p.read_bytes() for p in v.rglob("*") if p.is_file() and p.name != "_manifest.json"}


def lay(log: Path, source: Path, names: list[str], cut: int | None) -> None:
    """Hard links to ``names``; the last a copy cut to its first ``cut`` bytes, zeros after (being written)."""
    shutil.rmtree(log, ignore_errors=True)
    log.mkdir(parents=True)
    for n in names[:-1] if cut is not None else names:
        os.link(source / n, log / n)
    if cut is not None:
        data = bytearray((source / names[-1]).read_bytes())
        data[cut:] = bytes(len(data) - cut)
        (log / names[-1]).write_bytes(bytes(data))


def record_ends(segment: Path) -> list[int]:
    sys.path.insert(0, str(ROOT))
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import Segment
    import rocketidx.layout as L
    seg = Segment(str(segment), int(segment.name), segment.stat().st_size)
    ends: list[int] = []
    for _, _, recs in CommitLogReader([seg], check_crc=False).record_chunks():
        ends.extend((recs[:, L.REC_POS] + recs[:, L.REC_TOTAL]).tolist())
    return ends


def build(log: Path, out: Path, window: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*RIDX, "build", "--commitlog", str(log), "--out", str(out), "--window", window,
                             "--timezone", "UTC", "--targets", "index,consumequeue", "--hash-slots", "50000",
                             "--index-num", "200000", "--cq-file-size", "60000", "--in-process", "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--window", default="1h")
    a = p.parse_args(argv)
    rng = random.Random(a.seed)
    sys.path.insert(0, str(ROOT))
    from rocketidx.sample.generate import GenConfig, generate_store, same_store
    cfg = GenConfig(messages=1_200_000, segment_bytes=SEGMENT, span_ms=12 * 3_600_000, clock_steps=4,
                    clock_back_ms=90 * 60_000, seed=a.seed)
    store = DATA / "store"
    if not same_store(store / "generator.json", cfg):
        generate_store(store, cfg, replace=True)
    source = store / "commitlog"
    names = sorted(os.listdir(source))
    work = DATA / "work"
    shutil.rmtree(work, ignore_errors=True)
    log, out, ref = work / "log", work / "out", work / "ref"
    count, first = 3, 0  # whole segments from names[first:count], then part of the next
    cut = rng.choice(record_ends(source / names[count]))
    lay(log, source, names[first:count + 1], cut)
    b = build(log, out, a.window)
    assert b.wait() == 0, b.stderr.read()
    took = 1.0
    failures = []
    for run in range(a.runs):
        # Tonight's log: the segment being written grew (or was finished and the next begun), or retention ran.
        if rng.random() < 0.25 and count - first > 2:
            first += 1
            step = "retention"
        elif rng.random() < 0.5 or count + 2 >= len(names):
            ends = [e for e in record_ends(source / names[count]) if e > cut]
            cut = rng.choice(ends) if ends else cut
            step = "grew in place"
        else:
            count += 1
            cut = rng.choice(record_ends(source / names[count]))
            step = "next segment"
        lay(log, source, names[first:count + 1], cut)
        before = version(out)
        proc = build(log, out, a.window)
        delay = rng.uniform(0, took)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        code = proc.wait()
        after = version(out)
        problems = []
        shutil.rmtree(ref, ignore_errors=True)
        full = build(log, ref, a.window, "--full")
        if full.wait() != 0:
            problems.append(f"the full build failed: {full.stderr.read().strip()}")
        if code == 0:
            state = "finished before the kill"
        elif after != before:
            # Killed after its commit point: the new version is the output now, and must be whole and right.
            state = "killed after its commit"
            if files(out) != files(ref):
                problems.append("killed after the commit, and the committed files differ from a full build's")
        else:
            state = "killed"
        t = time.monotonic()
        again = build(log, out, a.window)
        outcome = again.wait()
        took = max(0.2, time.monotonic() - t)
        said = json.loads(again.stdout.read() or "{}").get("incremental") if outcome == 0 else None
        if outcome != 0:
            problems.append(f"the rerun failed: {again.stderr.read().strip()}")
        if outcome == 0 and files(out) != files(ref):
            problems.append("the rerun's files differ from a full build's")
        if said is None or "read_from" not in said:
            problems.append(f"the rerun was not incremental: {said}")
        line = {"run": run, "step": step, "kill_after_s": round(delay, 3), "state": state, "exit": code,
                "rerun": (said or {}).get("why"), "ok": not problems, "problems": problems}
        print(json.dumps(line), flush=True)
        if problems:
            failures.append(line)
    print(f"{a.runs - len(failures)}/{a.runs} runs passed")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
