"""This checkout's ``rocketidx build`` against an older commit's, paired in one run: end-to-end wall time of
whole processes on the same store, old and new alternating round by round (so a machine's drift hits both),
medians and the ratio new/old, and the two outputs' files compared byte for byte.

The old commit is checked out as a git worktree under ``bench-data/pair-<commit>/`` (kept for the next run);
both sides run on this environment's Python with ``PYTHONPATH`` pointing at their own tree (checked: each
child reports the package it imported). The compiled kernel is copied over when ``rocketidx/_native.c`` is
the same in both, else built in the worktree.

Usage: ``python bench/speed/bench_pair.py --old 5d56397 [--store store-6m] [--rounds 3]
[--engines in-process,local[2]]`` (``--store``: a name of bench_engine.py's stores, generated once, or a
directory).
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
PY = sys.executable
sys.path.insert(0, str(ROOT / "bench" / "speed"))


def worktree(commit: str) -> Path:
    """The old commit's tree (made once), with a compiled kernel beside its sources."""
    sha = subprocess.run(["git", "rev-parse", "--short=12", commit], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    tree = DATA / f"pair-{sha}"
    if not (tree / "rocketidx").is_dir():
        DATA.mkdir(exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=ROOT, check=True,
                       capture_output=True)
    if not list((tree / "rocketidx").glob("_native*.so")):
        ours = list((ROOT / "rocketidx").glob("_native*.so"))
        if ours and filecmp.cmp(ROOT / "rocketidx" / "_native.c", tree / "rocketidx" / "_native.c", shallow=False):
            shutil.copy2(ours[0], tree / "rocketidx" / ours[0].name)
        else:
            subprocess.run([PY, "setup.py", "build_ext", "--inplace"], cwd=tree, check=True, capture_output=True)
    return tree


def run_build(tree: Path, store: Path, out: Path, engine: str) -> tuple[float, str]:
    """One whole ``rocketidx build`` process of ``tree``'s package: (wall seconds, the package it ran)."""
    shutil.rmtree(out, ignore_errors=True)
    flags = ["--in-process"] if engine == "in-process" else ["--master", engine]
    env = dict(os.environ, PYTHONPATH=str(tree), PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY)
    probe = subprocess.run([PY, "-c", "import rocketidx; print(rocketidx.__file__)"], env=env, cwd=tree,
                           check=True, capture_output=True, text=True).stdout.strip()
    t = time.monotonic()
    subprocess.run([PY, "-m", "rocketidx", "build", "--commitlog", str(store / "commitlog"), "--out", str(out),
                    "--window", "1h", "--json", *flags], env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t, probe


def index_files(out: Path) -> list[Path]:
    return sorted((out / "index").iterdir())  # OUT/index: the committed version's, through OUT/current


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the commit to pair against")
    ap.add_argument("--store", default="store-6m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engines", default="in-process,local[2]")
    a = ap.parse_args()
    if Path(a.store).is_dir():
        store = Path(a.store)
    else:
        from bench_engine import ensure_store
        store = ensure_store(a.store)
    old = worktree(a.old)
    sides = {"old": old, "new": ROOT}
    results = {}
    for engine in a.engines.split(","):
        times = {"old": [], "new": []}
        for r in range(a.rounds):
            for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
                wall, pkg = run_build(sides[side], store, DATA / f"pair-out-{side}", engine)
                if not pkg.startswith(str(sides[side])):
                    raise SystemExit(f"the {side} side imported {pkg}, not its own tree {sides[side]}")
                times[side].append(wall)
                print(f"{engine:12} round {r + 1} {side}: {wall:.1f} s", flush=True)
        a_files, b_files = index_files(DATA / "pair-out-old"), index_files(DATA / "pair-out-new")
        same = len(a_files) == len(b_files) and all(filecmp.cmp(x, y, shallow=False) for x, y in zip(a_files, b_files))
        med = {k: statistics.median(v) for k, v in times.items()}
        results[engine] = {"old_s": times["old"], "new_s": times["new"], "median_old_s": round(med["old"], 2),
                           "median_new_s": round(med["new"], 2), "ratio": round(med["new"] / med["old"], 3),
                           "files_identical": same, "files": len(b_files)}
        print(f"{engine:12} median old {med['old']:.1f} s, new {med['new']:.1f} s, new/old "
              f"{med['new'] / med['old']:.3f}; {len(b_files)} files {'identical' if same else 'DIFFER'}", flush=True)
    (DATA / "bench-pair.json").write_text(json.dumps({"old": a.old, "store": str(store), **results}, indent=1) + "\n")
    return 0 if all(r["files_identical"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
