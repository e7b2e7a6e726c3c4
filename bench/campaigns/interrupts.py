"""Interrupt harness: Ctrl-C (SIGINT to the process group, as a terminal sends it) and SIGTERM at random
moments of ``rocketidx build --overwrite`` runs, in process and on Spark.

Each run replaces the output with a build that differs from the one committed (the window alternates),
so an interrupted run is seen for what it left. After every run it checks:
- the exit status is 130 and stderr is one line saying it was interrupted; or the run finished (exit 0)
  before the signal, or the signal came during the commit and the line says the commit was finished;
- ``OUT/current`` names the previous version unless the commit finished, and that version is whole
  (its manifest has the window of the build that made it, every listed file is there);
- no staged version directory is left in OUT, no process that carried the run's marker is alive, and the
  run's temporary directory (TMPDIR and SPARK_LOCAL_DIRS) is empty.

    .venv/bin/python bench/campaigns/interrupts.py [--runs 20] [--messages 1500000] [--seed 1]

Exit 0 when every run passed. The store is generated once under bench-data/interrupts/.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIDX = [sys.executable, "-m", "rocketidx"]


def marked_pids(marker: str) -> list[int]:
    """Processes whose environment carries the run's marker (the CLI, its JVM, Spark's Python workers)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:
                continue
    return found


def committed(out: Path) -> tuple[str | None, int | None]:
    cur = out / "current"
    if not cur.is_symlink():
        return None, None
    version = os.readlink(cur)
    manifest = json.loads((out / version / "_manifest.json").read_text())
    missing = [f["name"] for f in manifest["files"] if not (out / version / "index" / f["name"]).is_file()]
    if missing:
        raise AssertionError(f"{version} lists files it does not hold: {missing[:3]}")
    return version, manifest["window_ms"]


def run_once(store: Path, out: Path, engine: list[str], window_ms: int, sig: int, delay: float,
             scratch: Path) -> tuple[subprocess.CompletedProcess, float]:
    marker = f"RIDX_INTERRUPT_RUN={uuid.uuid4().hex}"
    env = dict(os.environ, TMPDIR=str(scratch), SPARK_LOCAL_DIRS=str(scratch),
               RIDX_INTERRUPT_RUN=marker.split("=", 1)[1])
    cmd = RIDX + ["build", "--commitlog", str(store), "--out", str(out), "--window", str(window_ms),
                  "--timezone", "UTC", "--overwrite", *engine]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    time.sleep(delay)
    try:
        os.killpg(p.pid, sig) if sig == signal.SIGINT else os.kill(p.pid, sig)
    except ProcessLookupError:
        pass
    stdout, stderr = p.communicate(timeout=300)
    wall = time.monotonic() - t0
    deadline = time.monotonic() + 20
    while marked_pids(marker.split("=", 1)[1]) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = marked_pids(marker.split("=", 1)[1])
    if left:
        raise AssertionError(f"processes left: {left}")
    return subprocess.CompletedProcess(cmd, p.returncode, stdout.decode(), stderr.decode()), wall


def check(result, before: tuple, after: tuple, out: Path, scratch: Path, window_ms: int) -> str:
    err_lines = [line for line in result.stderr.splitlines() if line.strip()]
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".v-") and p.name != after[0]]
    if leftovers:
        raise AssertionError(f"staged versions left in {out}: {leftovers}")
    if any(scratch.iterdir()):
        raise AssertionError(f"temporary files left: {sorted(p.name for p in scratch.iterdir())[:5]}")
    if result.returncode == 0:
        if after[1] != window_ms:
            raise AssertionError("exit 0 but the output is not the new build")
        return "finished before the signal"
    if result.returncode != 130:
        raise AssertionError(f"exit {result.returncode}: {result.stderr[-2000:]}")
    if len(err_lines) != 1 or "interrupted" not in err_lines[0]:
        raise AssertionError(f"stderr is not one line ({len(err_lines)} lines): " + " | ".join(err_lines))
    if "commit" in err_lines[0]:
        if after[1] != window_ms:
            raise AssertionError("said the commit finished, but the output is the old build")
        return "interrupted during the commit, which finished"
    if after != before:
        raise AssertionError(f"current moved from {before} to {after} on an interrupted run")
    return "interrupted; previous output unchanged"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=20, help="runs per engine and signal, split evenly (default 20)")
    p.add_argument("--messages", type=int, default=1_500_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default=str(ROOT / "bench-data" / "interrupts"))
    p.add_argument("--engines", default="in-process,spark", help="which engines (default in-process,spark)")
    a = p.parse_args(argv)
    rng = random.Random(a.seed)
    data = Path(a.data)
    store = data / "store"
    if not (store / "generator.json").exists():
        subprocess.run(RIDX + ["gen", "--out", str(store), "--messages", str(a.messages), "--span", "6h"],
                       check=True, stdout=subprocess.DEVNULL)
    engines = {"in-process": ["--in-process"], "spark": ["--master", "local[2]"]}
    scratch = data / "tmp"
    failures, outcomes, t_all = 0, {}, time.monotonic()
    for name, flags in engines.items():
        if name not in a.engines.split(","):
            continue
        out = data / f"out-{name}"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        # One uninterrupted run gives the output to protect and the run's length to aim the signals at.
        first, wall = run_once(store, out, flags, 1_800_000, 0, 0, scratch)
        if first.returncode != 0:
            print(f"{name}: the first build failed: {first.stderr[-2000:]}", file=sys.stderr)
            return 2
        print(f"{name}: an uninterrupted build takes {wall:.1f}s; signals land in [0.2s, {wall * 1.05:.1f}s]")
        for i in range(a.runs):
            sig = signal.SIGINT if i % 2 == 0 else signal.SIGTERM
            before = committed(out)
            window = 1_200_000 if before[1] == 1_800_000 else 1_800_000  # differs from what is committed
            delay = rng.uniform(0.2, wall * 1.05)
            try:
                result, took = run_once(store, out, flags, window, sig, delay, scratch)
                what = check(result, before, committed(out), out, scratch, window)
            except AssertionError as e:
                failures += 1
                what = f"FAILED: {e}"
                shutil.rmtree(scratch, ignore_errors=True)
                scratch.mkdir(parents=True)
            outcomes[(name, what.split(":")[0])] = outcomes.get((name, what.split(":")[0]), 0) + 1
            print(f"  {name} {signal.Signals(sig).name} at {delay:.2f}s: {what}", flush=True)
    print(f"{sum(outcomes.values())} runs in {time.monotonic() - t_all:.0f}s, {failures} failures")
    for (name, what), n in sorted(outcomes.items()):
        print(f"  {name}: {what}: {n}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
