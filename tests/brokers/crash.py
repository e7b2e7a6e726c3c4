"""Crash, repair, serve: kill -9 a broker in the middle of a workload, then on one copy of the store restart
the broker alone, and on another run ``rocketidx verify --store`` and ``backfill --store`` before the
restart; measure what each serves, and check what verify said the broker's restart would do against what
it did (the derived files before and after that restart)."""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from brokers.harness import Cluster, driver_classes, major, java_bin, _spawn, _signal_group
from brokers.served import key_sample, log_messages, measure, queued

ROCKETIDX = [sys.executable, "-m", "rocketidx"]


def rocketidx(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run([*ROCKETIDX, *args], capture_output=True, text=True, timeout=900)
    if check and run.returncode != 0:
        raise AssertionError(f"rocketidx {' '.join(args)} exited {run.returncode}:\n{run.stderr[-2000:]}")
    return run


def queue_entries(store: Path) -> set[tuple[str, int, int]]:
    """(topic, queueId, CommitLog offset) of every entry of the store's ConsumeQueue files."""
    out = set()
    cq = store / "consumequeue"
    if not cq.exists():
        return out
    for f in cq.glob("*/*/*"):
        a = np.frombuffer(f.read_bytes()[: f.stat().st_size // 20 * 20], dtype=">i8,>i4,>i8")
        phy, size = a["f0"], a["f1"]
        keep = size > 0
        out.update((f.parent.parent.name, int(f.parent.name), int(p)) for p in phy[keep])
    return out


def index_entries(index_dir: Path, slots: int) -> Counter:
    """(keyHash, CommitLog offset) of every item of every IndexFile, counted."""
    out: Counter = Counter()
    if not index_dir.exists():
        return out
    for f in sorted(index_dir.iterdir()):
        data = f.read_bytes()
        if len(data) < 40:
            continue
        count = int.from_bytes(data[36:40], "big")
        items = np.frombuffer(data, dtype=">i4,>i8,>i4,>i4", count=max(count - 1, 0), offset=40 + 4 * slots + 20)
        out.update(zip(items["f0"].tolist(), items["f1"].tolist()))
    return out


def crash_run(version: str, root: Path, *, seed: int, messages: int, sample: int = 1000,
              kill_between: tuple[float, float] = (0.1, 0.9)) -> dict:
    """One kill -9 at a random moment of the workload (after a random share, within ``kill_between``, of
    its messages were sent: a moment in time would depend on the machine's load); returns the row of the
    crash table and the checks."""
    rnd = random.Random(seed)
    alone = Cluster(version, root / "alone")
    flags = ["timer"] if major(version) >= 5 else []
    alone.start()
    try:
        cp = f"{driver_classes(version)}:{alone.lib / '*'}"
        err = open(alone.root / "logs" / "driver.err", "ab")
        driver = _spawn([java_bin(), "-Xmx256m", *alone._props(), "-cp", cp, "Workload", "send", alone.namesrv_addr,
                         f"127.0.0.1:{alone.port}", str(alone.root / "sent.jsonl"), str(messages), str(seed), *flags],
                        cwd=alone.root, env=alone._env(), stdout=err, stderr=err)
        target = int(messages * rnd.uniform(*kill_between))
        sent, t0 = alone.root / "sent.jsonl", time.monotonic()
        while driver.poll() is None and (sent.read_bytes().count(b"\n") if sent.exists() else 0) < target:
            time.sleep(0.05)
        at = time.monotonic() - t0
        alone.stop_broker(kill=True)
        _signal_group(driver, 9)
        driver.wait()
        err.close()

        # The crashed store, twice: the broker alone restarts on one; rocketidx repairs the other first.
        repaired = Cluster(version, root / "repaired")
        repaired.root.mkdir(parents=True)
        shutil.copytree(alone.store, repaired.store, symlinks=True)
        crashed = root / "crashed"
        shutil.copytree(alone.store, crashed, symlinks=True)
        msgs = log_messages(crashed)
        keys = key_sample(msgs, sample, seed)

        # rocketidx's reference build of the crashed log, and its verdict on the crashed store
        conf = str(alone.write_conf())
        ref = root / "reference"
        rocketidx("build", "--commitlog", str(crashed / "commitlog"), "--out", str(ref), "--targets",
                  "index,consumequeue", "--window", "0", "--broker-conf", conf, "--broker-version", version)
        verify = rocketidx("verify", "--store", str(repaired.store), "--broker-conf", conf, "--broker-version", version,
                           "--json", check=False)
        report = json.loads(verify.stdout) if verify.stdout.strip() else {}

        alone.start_broker()
        broker_alone = measure(alone, msgs, keys, "alone")
        alone.stop_broker()

        rocketidx("backfill", "--store", str(repaired.store), "--broker-conf", conf,
                  "--broker-version", version)
        repaired.start()
        after = measure(repaired, msgs, keys, "repaired")
        repaired.stop()
    finally:
        alone.stop()
    checks = check_statements(report, verify.returncode, crashed, alone.store, ref, broker_alone,
                              int(alone.conf["maxHashSlotNum"]))
    return {"version": version, "seed": seed, "killed_at_s": round(at, 2), "killed_after_sent": target, "log_messages": len(queued(msgs)),
            "alone": broker_alone.as_dict(), "after_backfill": after.as_dict(), "verify_exit": verify.returncode,
            "checks": checks}


def check_statements(report: dict, exit_code: int, before: Path, after: Path, ref: Path, alone,
                     slots: int) -> list[dict]:
    """Each machine-checkable statement of verify's restart model against the broker's own restart:
    ``redispatch_from`` (the queues after the restart are those before, cut at the log's end, plus every
    reference entry at or past it), ``index_deleted`` (exactly those files are gone), the index entries it
    says stay lost (the reference entries missing after the restart), and the exit code (1 exactly when
    the broker alone loses a message or a key)."""
    model = report.get("state", {}).get("restart_model", {})
    out = []
    if not model:
        return [{"kind": "model", "ok": False, "why": "no restart_model in verify --json"}]
    log_end = model["log_end"]
    ref_q = queue_entries(ref)
    pre_q = {e for e in queue_entries(before) if e[2] < log_end}
    post_q = {e for e in queue_entries(after) if e[2] < log_end}  # past it: what the broker wrote since
    r = model.get("redispatch_from")
    predicted = pre_q | {e for e in ref_q if r is not None and e[2] >= r}
    out.append({"kind": f"{model['kind']}: queues re-dispatched from {r}", "ok": post_q == predicted,
                "missing": len(predicted - post_q), "extra": len(post_q - predicted)})

    pre_names = {p.name for p in (before / "index").iterdir()} if (before / "index").exists() else set()
    post_names = {p.name for p in (after / "index").iterdir()} if (after / "index").exists() else set()
    deleted = set(model.get("index_deleted") or [])
    out.append({"kind": f"{model['kind']}: IndexFiles deleted", "ok": (pre_names - deleted) <= post_names
                and not (deleted & post_names), "said": sorted(deleted),
                "gone": sorted(pre_names - post_names)})

    idx = model.get("index") or {}
    if idx:
        lost = sum((index_entries(ref / "index", slots) - index_entries(after / "index", slots)).values())
        out.append({"kind": f"{model['kind']}: index entries that stay lost", "ok": lost == idx.get("lost_entries"),
                    "said": idx.get("lost_entries"), "measured": lost})

    loses = alone.got < alone.messages or alone.found < alone.keys
    out.append({"kind": "exit 1 exactly when the broker alone loses something", "ok": (exit_code == 1) == loses,
                "exit": exit_code, "broker_alone_loses": loses})
    return out
