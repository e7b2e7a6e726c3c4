"""Light queues on a real broker: lose them, repair them, serve them. A broker with ``enableLmq`` and
``enableMultiDispatch`` takes a workload whose messages name light queues (``%LMQ%lqN``); a light-queue
consumer reads every one; after a clean stop the store's ``consumequeue/`` is deleted, ``rocketidx backfill
--store`` rebuilds it, the broker starts on it, and the consumer reads every light queue again.

    python -m brokers.light [--versions 4.9.8 5.1.4 5.5.0] [--messages 600] [--json FILE]

What it says per version: the light queues, the messages the workload named in them, what the consumer read
before and after the repair, and whether each message named in a light queue was read from it afterwards.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from brokers.harness import Cluster, HarnessError, run_driver
from brokers.matrix import read_jsonl, send_flags

LMQ_SETTINGS = {"enableLmq": "true", "enableMultiDispatch": "true"}


def light_reads(lines: list[dict]) -> dict[str, set[str]]:
    """Light queue -> the ids of the messages a pull from its min to max offset returned."""
    out: dict[str, set[str]] = {}
    for d in lines:
        if "msgId" in d:
            out.setdefault(d["lmq"], set()).add(d["msgId"])
    return out


def named(sent: list[dict]) -> dict[str, set[str]]:
    """Light queue -> the ids of the messages sent to it that reach their topic (a rolled-back or unsettled
    transaction never does; a name holding '/' is no light queue the broker loads)."""
    out: dict[str, set[str]] = {}
    for r in sent:
        if r["status"] != "SEND_OK" or not r.get("lmq") or r["kind"] in ("tx-rollback", "tx-unknown"):
            continue
        for name in r["lmq"].split(","):
            if "/" not in name:
                out.setdefault(name, set()).add(r["msgId"])
    return out


def run_version(version: str, root: Path, messages: int = 600, seed: int = 1) -> dict:
    """Workload, read, stop, delete consumequeue/, backfill, start, read again; the broker is down after."""
    root.mkdir(parents=True, exist_ok=True)
    res: dict = {"version": version, "ok": False}
    cluster = Cluster(version, root)
    cluster.conf.update(LMQ_SETTINGS)
    try:
        cluster.start()
        run_driver(cluster, "send", f"127.0.0.1:{cluster.port}", str(root / "sent.jsonl"), str(messages), str(seed),
                   *send_flags(version, cluster.conf), log="send")
        run_driver(cluster, "readlmq", str(root / "before.jsonl"), log="readlmq-before")
        cluster.stop_broker()
        sent = read_jsonl(root / "sent.jsonl")
        want = named(sent)
        before = light_reads(read_jsonl(root / "before.jsonl"))
        shutil.move(cluster.store / "consumequeue", root / "broker-consumequeue")
        run = subprocess.run([sys.executable, "-m", "rocketidx", "backfill", "--store", str(cluster.store),
                              "--broker-conf", str(cluster.broker_conf), "--broker-version", version],
                             capture_output=True, text=True, timeout=900)
        (root / "logs" / "backfill.out").write_text(run.stdout + run.stderr)
        res["backfill_rc"] = run.returncode
        if run.returncode != 0:
            res["error"] = f"backfill exited {run.returncode}: {run.stderr.strip()[-400:]}"
            return res
        theirs = {p.relative_to(root / "broker-consumequeue"): p.read_bytes()
                  for p in (root / "broker-consumequeue").glob("%LMQ%*/[0-9]*/*")}
        ours = {p.relative_to(cluster.store / "consumequeue"): p.read_bytes()
                for p in (cluster.store / "consumequeue").glob("%LMQ%*/[0-9]*/*")}
        res["light_files"] = [sum(ours.get(k) == v for k, v in theirs.items()), len(set(theirs) | set(ours))]
        cluster.start_broker()
        run_driver(cluster, "readlmq", str(root / "after.jsonl"), log="readlmq-after")
        after = light_reads(read_jsonl(root / "after.jsonl"))
        res.update(light_queues=len(want), named=sum(len(v) for v in want.values()),
                   read_before=sum(len(v) for v in before.values()), read_after=sum(len(v) for v in after.values()),
                   missing_before=sum(len(v - before.get(q, set())) for q, v in want.items()),
                   missing_after=sum(len(v - after.get(q, set())) for q, v in want.items()),
                   same_as_before=before == after)
        res["ok"] = (res["light_queues"] >= 10 and res["missing_after"] == 0 and res["same_as_before"]
                     and res["light_files"][0] == res["light_files"][1] > 0)
    except (HarnessError, subprocess.TimeoutExpired, OSError, ValueError) as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        cluster.stop()
    return res


def line(res: dict) -> str:
    if "named" not in res:
        return f"{res['version']}: FAILED: {res.get('error')}"
    return (f"{res['version']}: {res['light_queues']} light queues, {res['named']} message(s) named in them, "
            f"light queue files rebuilt identical {res['light_files'][0]}/{res['light_files'][1]}; the "
            f"consumer read {res['read_before']} before (missing {res['missing_before']}), after consumequeue/ was "
            f"deleted and rocketidx backfill rebuilt it {res['read_after']} (missing {res['missing_after']}); "
            f"{'the same as before' if res['same_as_before'] else 'NOT the same as before'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m brokers.light", description=__doc__.split("\n\n")[0])
    p.add_argument("--versions", nargs="+", default=["4.9.8", "5.1.4", "5.5.0"])
    p.add_argument("--messages", type=int, default=600)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--keep", action="store_true", help="keep the versions' directories")
    a = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="rocketidx-light-"))
    results = []
    try:
        for v in a.versions:
            results.append(run_version(v, work / v, a.messages))
            print(line(results[-1]), flush=True)
    finally:
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1) + "\n")
        if a.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if results and all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
