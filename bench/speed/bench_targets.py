"""What the derived stores cost on top of the index, in process, from one read of the log (issue 34, Must show
4): store-6m's shape where a tenth of the messages name light queues and a tenth are inner batches on a BatchCQ
topic (``store-6m-derived``), built as the index alone, as the index and the ConsumeQueues, and as everything a
broker derives (light queues on, the batch topic's batch consume queues); medians of ``--rounds``, and each
build's ratio to the index alone (target: at most 1.4x for everything).

Usage: ``python bench/speed/bench_targets.py [--rounds 3]``; results in ``bench-data/results-targets.json``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import DATA, STORES, ensure_store  # noqa: E402

STORES["store-6m-derived"] = dict(STORES["store-6m"], share_lmq=0.1, share_batch=0.1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    from rocketidx.build.in_process import build_index
    from rocketidx.config import BuildConfig, LightQueues, batch_topics_of
    store = ensure_store("store-6m-derived")
    batch = batch_topics_of(store / "config" / "topics.json")
    builds = {"index": BuildConfig(timezone="UTC"),
              "index,consumequeue": BuildConfig(timezone="UTC", targets=("index", "consumequeue")),
              "everything": BuildConfig(timezone="UTC", targets=("index", "consumequeue"),
                                        light_queues=LightQueues(True, "5.2"), batch_topics=batch)}
    walls: dict[str, list[float]] = {k: [] for k in builds}
    for _ in range(a.rounds):
        for name, config in builds.items():  # interleaved, so a machine's drift hits every build alike
            out = Path(tempfile.mkdtemp(dir=DATA))
            t = time.monotonic()
            build_index(store, out, config, time_index=None)
            walls[name].append(round(time.monotonic() - t, 2))
            shutil.rmtree(out)
    base = statistics.median(walls["index"])
    results = {name: {"wall_s": w, "median_s": statistics.median(w), "vs_index": round(statistics.median(w) / base, 2)}
               for name, w in walls.items()}
    for name, r in results.items():
        print(f"targets {name:20s} median {r['median_s']:.2f} s  ({r['vs_index']:.2f}x the index alone)", flush=True)
    (DATA / "results-targets.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
