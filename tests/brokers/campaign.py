"""``make brokers``' crash campaign: for each pinned version, kill -9s at random moments of the workload and
the store-repair scenarios on a stopped store; the broker alone against ``rocketidx backfill`` first, and
every statement of ``verify --store``'s restart model checked against the broker's own restart.

    cd tests && ../.venv/bin/python -m brokers.campaign [--versions V ...] [--kills 4] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from brokers.crash import DAMAGE, crash_run, scenario_run
from brokers.harness import versions


def table(rows: list[dict]) -> list[str]:
    out = ["| version | case | log messages | broker alone: got / keys found | after backfill: got / keys found | verify exit |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        a, b = r["alone"], r["after_backfill"]
        out.append(f"| {r['version']} | {r['case']} | {r['log_messages']} | {a['got']}/{a['messages']}, "
                   f"{a['found']}/{a['keys']} | {b['got']}/{b['messages']}, {b['found']}/{b['keys']} | "
                   f"{r['verify_exit']} |")
    return out


def statement_tally(rows: list[dict]) -> list[str]:
    tally: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        for c in r["checks"]:
            kind = c["kind"].split(" from ")[0]
            t = tally[(r["version"], kind)]
            t[0] += 1
            t[1] += not c["ok"]
    return [f"{v}: {kind}: {n} checked, {wrong} wrong" for (v, kind), (n, wrong) in sorted(tally.items())]


def main(argv: list[str] | None = None) -> int:
    pinned, _ = versions()
    p = argparse.ArgumentParser(prog="brokers.campaign")
    p.add_argument("--versions", nargs="+", default=pinned)
    p.add_argument("--kills", type=int, default=4, help="kill -9s per version (default 4)")
    p.add_argument("--messages", type=int, default=3000, help="workload of a kill run (default 3000)")
    p.add_argument("--scenarios", default="all", help="'all', 'none', or names of tests/brokers/crash.py DAMAGE")
    p.add_argument("--work", help="where the runs' directories go (default: a temporary directory, removed)")
    p.add_argument("--json", help="write every row here")
    a = p.parse_args(argv)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="rocketidx-campaign-"))
    damages = list(DAMAGE) if a.scenarios == "all" else [] if a.scenarios == "none" else a.scenarios.split(",")
    rows, failed = [], []
    t_all = time.monotonic()
    try:
        for v in a.versions:
            jobs = [("kill", k) for k in range(a.kills)] + [("damage", d) for d in damages]
            for i, (what, arg) in enumerate(jobs):
                root = work / f"{v}-{i}"
                t0 = time.monotonic()
                try:
                    if what == "kill":
                        row = crash_run(v, root, seed=1000 + 17 * arg, messages=a.messages)
                    else:
                        row = scenario_run(v, root, arg, seed=2000 + i, messages=800)
                except Exception as e:  # one run's failure is a row of the report, not the campaign's end
                    failed.append(f"{v} {what} {arg}: {type(e).__name__}: {e}")
                    print(f"FAILED {failed[-1]}", flush=True)
                    continue
                finally:
                    if not a.work:
                        shutil.rmtree(root, ignore_errors=True)
                row["run_s"] = round(time.monotonic() - t0, 1)
                rows.append(row)
                bad = [c["kind"] for c in row["checks"] if not c["ok"]]
                print(f"{v} {row['case']}: log {row['log_messages']}, alone {row['alone']['got']} msgs "
                      f"{row['alone']['found']}/{row['alone']['keys']} keys, after backfill "
                      f"{row['after_backfill']['got']} msgs {row['after_backfill']['found']}/"
                      f"{row['after_backfill']['keys']} keys, verify exit {row['verify_exit']}, "
                      f"wrong statements {bad} ({row['run_s']} s)", flush=True)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(["", *table(rows), "", *statement_tally(rows), "",
                     f"{len(rows)} runs in {time.monotonic() - t_all:.0f} s; {len(failed)} failed to run"]))
    for f in failed:
        print("  " + f)
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "failed": failed}, indent=1))
    lost = [r for r in rows if r["after_backfill"]["got"] < r["after_backfill"]["messages"]
            or r["after_backfill"]["found"] < r["after_backfill"]["keys"]]
    wrong = [r for r in rows if any(not c["ok"] for c in r["checks"])]
    return 1 if lost or wrong or failed else 0


if __name__ == "__main__":
    sys.exit(main())
