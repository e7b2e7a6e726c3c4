"""The RocksDB consume queue on a real broker (issue 34): check it, damage it, lose it, repair it, serve it.

A 5.x broker with ``storeType=defaultRocksDB`` takes the matrix's workload (plain, keyed, delayed, timer,
transactional, retried, batched); a consumer reads every queue. After a clean stop:

1. ``rocketidx verify --store`` on the broker's own store must be clean;
2. on copies of the store, one damage each (an entry deleted, an entry changed, a queue's ``max`` key wrong)
   must each be reported as its kind;
3. ``consumequeue/`` (the database) is deleted, ``rocketidx backfill --store`` rebuilds it, and its entries,
   ``max`` keys and checkpoint must be the broker's own; the broker starts on it and the consumer must read
   every message it read before, at the same queue offsets.

    python -m brokers.rocksdb [--versions 5.3.3 5.5.0] [--messages 600] [--json FILE] [--keep] [--set K=V]
"""
from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from brokers.harness import Cluster, HarnessError, run_driver
from brokers.matrix import read_jsonl, send_flags

ROCKS_SETTINGS = {"storeType": "defaultRocksDB"}


def reads(path: Path) -> set[tuple]:
    """(topic, queueId, queueOffset, msgId) of every message a consumer read."""
    return {(d["topic"], d["queueId"], d["queueOffset"], d["msgId"]) for d in read_jsonl(path) if "queueOffset" in d}


def verify(cluster: Cluster, store: Path, log: Path) -> dict:
    run = subprocess.run([sys.executable, "-m", "rocketidx", "verify", "--store", str(store), "--broker-conf",
                          str(cluster.broker_conf), "--broker-version", cluster.version, "--json"],
                         capture_output=True, text=True, timeout=900)
    log.write_text(run.stdout + run.stderr)
    try:
        report = json.loads(run.stdout)
    except ValueError:
        raise HarnessError(f"verify --store said no JSON (exit {run.returncode}): {run.stderr[-400:]}") from None
    return {"exit": run.returncode, "clean": report["clean"],
            "consumequeue": report["areas"]["consumequeue"]["counts"],
            "entries_checked": report["areas"]["consumequeue"]["entries_checked"]}


def damage(db: Path, kind: str) -> str:
    """One damage of ``kind`` to the stopped broker's database (a copy): which key it touched."""
    import rocksdict as rd
    from rocketidx.consumequeue import rocksdb as R
    table = R.read_table(db)
    queue = max((q for q in table.entries if not q[0].startswith(("%", "rmq_sys", "SCHEDULE"))),
                key=lambda q: len(table.entries[q]))
    e = table.entries[queue][len(table.entries[queue]) // 2]
    topic, qid = queue[0].encode(), queue[1]
    fams = rd.Rdict.list_cf(str(db))
    d = rd.Rdict(str(db), options=rd.Options(raw_mode=True), column_families={f: rd.Options(raw_mode=True)
                                                                               for f in fams})
    try:
        key = R.entry_key(topic, qid, int(e["queue_offset"]))
        if kind == "entry-deleted":
            del d[key]
        elif kind == "entry-changed":
            d[key] = struct.pack(">qiqq", int(e["phy_offset"]), int(e["size"]), int(e["tags_code"]) + 1,
                                 int(e["store_ts"]))
        else:  # max-wrong: the queue's end one entry short
            d.get_column_family(R.OFFSET_CF)[R.offset_key(topic, qid, "max")] = struct.pack(
                ">qq", int(table.entries[queue][-2]["phy_offset"]), int(table.entries[queue][-2]["queue_offset"]))
        d.flush()
    finally:
        d.close()
    (db / "rocksdict-config.json").unlink(missing_ok=True)
    return f"{queue[0]}/{qid}@{int(e['queue_offset'])}"


DAMAGES = {"entry-deleted": "missing-entry", "entry-changed": "wrong-field", "max-wrong": "max-offset"}


def run_version(version: str, root: Path, messages: int = 600, seed: int = 1, settings: dict | None = None) -> dict:
    """``settings``: broker.conf keys over the scenario's (``--set``: enableLmq and enableMultiDispatch make the
    workload name light queues, which the database then holds)."""
    root.mkdir(parents=True, exist_ok=True)
    res: dict = {"version": version, "ok": False, "settings": settings or {}}
    cluster = Cluster(version, root)
    cluster.conf.update({**ROCKS_SETTINGS, **(settings or {})})
    try:
        cluster.start()
        run_driver(cluster, "send", f"127.0.0.1:{cluster.port}", str(root / "sent.jsonl"), str(messages), str(seed),
                   *send_flags(version, cluster.conf), log="send")
        run_driver(cluster, "read", str(root / "before.jsonl"), log="read-before")
        cluster.stop_broker()
        store = cluster.store
        if not (store / "consumequeue" / "CURRENT").is_file():
            raise HarnessError("the broker kept no RocksDB database in consumequeue/")
        before = reads(root / "before.jsonl")
        res["own_store"] = verify(cluster, store, root / "logs" / "verify-own.out")
        res["damage"] = {}
        for kind, expected in DAMAGES.items():
            copy = root / f"damaged-{kind}"
            shutil.copytree(store, copy, symlinks=True)
            where = damage(copy / "consumequeue", kind)
            got = verify(cluster, copy, root / "logs" / f"verify-{kind}.out")
            res["damage"][kind] = {"where": where, "reported": got["consumequeue"],
                                   "found": got["consumequeue"].get(expected, 0) >= 1}
            shutil.rmtree(copy)
        from rocketidx.consumequeue.rocksdb import read_table
        theirs = read_table(store / "consumequeue")
        shutil.move(store / "consumequeue", root / "broker-consumequeue")
        run = subprocess.run([sys.executable, "-m", "rocketidx", "backfill", "--store", str(store), "--broker-conf",
                              str(cluster.broker_conf), "--broker-version", version],
                             capture_output=True, text=True, timeout=900)
        (root / "logs" / "backfill.out").write_text(run.stdout + run.stderr)
        if run.returncode != 0:
            raise HarnessError(f"backfill exited {run.returncode}: {run.stderr.strip()[-400:]}")
        ours = read_table(store / "consumequeue")
        same = sum(q in ours.entries and len(ours.entries[q]) == len(e) and bool((ours.entries[q] == e).all())
                   for q, e in theirs.entries.items())
        res["rebuilt"] = {"queues_identical": [same, len(set(theirs.entries) | set(ours.entries))],
                          "light_queues": sum(q[0].startswith("%LMQ%") for q in theirs.entries),
                          "entries": [ours.entry_count, theirs.entry_count], "max_equal": ours.max == theirs.max,
                          "checkpoint": [ours.checkpoint, theirs.checkpoint]}
        cluster.start_broker()
        run_driver(cluster, "read", str(root / "after.jsonl"), log="read-after")
        cluster.stop_broker()
        after = reads(root / "after.jsonl")
        res["read"] = {"before": len(before), "after": len(after), "missing_after": len(before - after),
                       "new_after": len(after - before)}
        res["after_restart"] = verify(cluster, store, root / "logs" / "verify-after.out")
        r = res["rebuilt"]
        res["ok"] = (res["own_store"]["clean"] and all(d["found"] for d in res["damage"].values())
                     and r["queues_identical"][0] == r["queues_identical"][1] > 0 and r["max_equal"]
                     and r["checkpoint"][0] == r["checkpoint"][1] and res["read"]["missing_after"] == 0
                     and res["read"]["before"] > 0)
    except (HarnessError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        cluster.stop()
    return res


def line(res: dict) -> str:
    if "read" not in res:
        return f"{res['version']}: FAILED: {res.get('error')}"
    own, r, rd = res["own_store"], res["rebuilt"], res["read"]
    dmg = "; ".join(f"{k} at {v['where']}: {v['reported']}" for k, v in res["damage"].items())
    return (f"{res['version']}: verify on the broker's own store: {'clean' if own['clean'] else own['consumequeue']} "
            f"({own['entries_checked']} entries); damaged copies: {dmg}; after consumequeue/ was deleted, backfill "
            f"rebuilt {r['entries'][0]} entries ({r['entries'][1]} in the broker's; {r['light_queues']} light queues), "
            f"queues identical "
            f"{r['queues_identical'][0]}/{r['queues_identical'][1]}, max keys {'equal' if r['max_equal'] else 'DIFFER'}, "
            f"checkpoint {r['checkpoint'][0]} vs {r['checkpoint'][1]}; the broker started on it and the consumer "
            f"read {rd['after']} (before: {rd['before']}; missing {rd['missing_after']}); verify after: "
            f"{'clean' if res['after_restart']['clean'] else res['after_restart']['consumequeue']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m brokers.rocksdb", description=__doc__.split("\n\n")[0])
    p.add_argument("--versions", nargs="+", default=["5.3.3", "5.5.0"])
    p.add_argument("--messages", type=int, default=600)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--keep", action="store_true", help="keep the versions' directories")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker.conf setting over the scenario's (repeatable), e.g. enableLmq=true")
    a = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="rocketidx-rocksdb-"))
    results = []
    try:
        for v in a.versions:
            results.append(run_version(v, work / v, a.messages, settings=dict(kv.split("=", 1) for kv in a.set)))
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
