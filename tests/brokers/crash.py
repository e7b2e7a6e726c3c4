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

from brokers.harness import Cluster, HarnessError, driver_classes, major, java_bin, _spawn, _signal_group
from brokers.served import Served, key_sample, log_messages, measure, queued

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
    alone.start()
    try:
        cp = f"{driver_classes(version)}:{alone.lib / '*'}"
        with open(alone.root / "logs" / "driver.err", "ab") as err:
            driver = _spawn([java_bin(), "-Xmx256m", *alone._props(), "-cp", cp, "Workload", "send",
                             alone.namesrv_addr, f"127.0.0.1:{alone.port}", str(alone.root / "sent.jsonl"),
                             str(messages), str(seed), *workload_flags(version)],
                            cwd=alone.root, env=alone._env(), stdout=err, stderr=err)
            target = int(messages * rnd.uniform(*kill_between))
            sent, t0 = alone.root / "sent.jsonl", time.monotonic()
            while driver.poll() is None and (sent.read_bytes().count(b"\n") if sent.exists() else 0) < target:
                time.sleep(0.05)
            at = time.monotonic() - t0
            alone.stop_broker(kill=True)
            _signal_group(driver, 9)
            driver.wait()
        row = judge(version, root, alone, seed=seed, sample=sample)
    finally:
        alone.stop()
    return {"version": version, "case": "kill -9", "seed": seed, "killed_at_s": round(at, 2),
            "killed_after_sent": target, **row}


def workload_flags(version: str) -> list[str]:
    return ["timer"] if major(version) >= 5 else []


def cut_queue_file(store: Path, rnd: random.Random) -> str:
    """The newest file of a queue of a user topic, cut in the middle of its last entry."""
    files = sorted(f for f in (store / "consumequeue").glob("T*/*/*") if f.stat().st_size)
    f = rnd.choice(files)
    data = f.read_bytes()
    used = len(data.rstrip(b"\0")) // 20 * 20 + 20
    f.write_bytes(data[: max(used - 7, 13)])
    return str(f.relative_to(store))


def _newest_index(store: Path, n: int) -> str:
    files = sorted((store / "index").iterdir())[-n:]
    for f in files:
        f.unlink()
    return ",".join(f.name for f in files)


DAMAGE = {
    "consumequeue/ deleted": lambda store, rnd: shutil.rmtree(store / "consumequeue") or "consumequeue",
    "one queue deleted": lambda store, rnd: _rm_one_queue(store, rnd),
    "newest IndexFiles deleted": lambda store, rnd: _newest_index(store, 2),
    "a queue file cut mid-entry": cut_queue_file,
}


def _rm_one_queue(store: Path, rnd: random.Random) -> str:
    q = rnd.choice(sorted(d for d in (store / "consumequeue").glob("T*/*") if d.is_dir()))
    shutil.rmtree(q)
    return str(q.relative_to(store))


def scenario_run(version: str, root: Path, damage: str, *, seed: int, messages: int, sample: int = 1000) -> dict:
    """The store-repair scenarios on a real broker's stopped store: a workload, a clean stop, the damage."""
    alone = Cluster(version, root / "alone")
    alone.start()
    try:
        from brokers.harness import run_driver
        run_driver(alone, "send", f"127.0.0.1:{alone.port}", str(alone.root / "sent.jsonl"), str(messages), str(seed),
                   *workload_flags(version))
        alone.stop_broker()
        what = DAMAGE[damage](alone.store, random.Random(seed))
        row = judge(version, root, alone, seed=seed, sample=sample)
    finally:
        alone.stop()
    return {"version": version, "case": damage, "seed": seed, "damaged": what, **row}


def judge(version: str, root: Path, alone: Cluster, *, seed: int, sample: int) -> dict:
    """A stopped broker's store in whatever state: on one copy the broker alone restarts; on another
    ``verify --store`` and ``backfill --store`` run first. What each serves, and verify's statements checked
    against the broker's own restart (the namesrv of ``alone`` must run)."""
    repaired = Cluster(version, root / "repaired")
    repaired.root.mkdir(parents=True)
    shutil.copytree(alone.store, repaired.store, symlinks=True)
    crashed = root / "crashed"
    shutil.copytree(alone.store, crashed, symlinks=True)
    msgs = log_messages(crashed)
    keys = key_sample(msgs, sample, seed)

    # rocketidx's reference build of the log, and its verdict on the store as left
    conf = str(alone.write_conf())
    ref = root / "reference"
    rocketidx("build", "--commitlog", str(crashed / "commitlog"), "--out", str(ref), "--targets",
              "index,consumequeue", "--window", "0", "--broker-conf", conf, "--broker-version", version)
    verify = rocketidx("verify", "--store", str(repaired.store), "--broker-conf", conf, "--broker-version", version,
                       "--json", check=False)
    report = json.loads(verify.stdout) if verify.stdout.strip() else {}

    t0 = time.monotonic()
    try:
        alone.start_broker(timeout=300)
        started = True
    except HarnessError as e:  # a broker whose load fails exits: it serves nothing
        if alone.broker is None or alone.broker.poll() is None:
            raise
        started, alone.broker = False, None
        print(f"  the broker alone did not start: {e}", flush=True)
    if started:
        broker_alone = measure(alone, msgs, keys, "alone")
        alone.stop_broker()
    else:
        broker_alone = Served(len(queued(msgs)), 0, len(keys), 0, ["the broker did not start"])
    alone_s = time.monotonic() - t0

    t0 = time.monotonic()
    backfill = rocketidx("backfill", "--store", str(repaired.store), "--broker-conf", conf, "--broker-version", version)
    try:
        repaired.start(timeout=300)
        after = measure(repaired, msgs, keys, "repaired")
    finally:
        repaired.stop()
    repaired_s = time.monotonic() - t0
    checks = check_statements(report, verify.returncode, crashed, alone.store, ref, broker_alone,
                              int(alone.conf["maxHashSlotNum"]), started)
    return {"log_messages": len(queued(msgs)), "alone": broker_alone.as_dict(), "after_backfill": after.as_dict(),
            "verify_exit": verify.returncode, "verify_summary": verify.stderr.strip().splitlines()[-1:] if
            verify.returncode > 1 else [], "backfill_said": backfill.stdout.strip().splitlines()[-3:],
            "restart_model": {k: (report.get("state", {}).get("restart_model") or {}).get(k) for k in
                              ("kind", "version", "redispatch_from", "index_deleted", "reindex_from")},
            "alone_s": round(alone_s, 1), "repaired_s": round(repaired_s, 1), "checks": checks}


def check_statements(report: dict, exit_code: int, before: Path, after: Path, ref: Path, alone,
                     slots: int, started: bool = True) -> list[dict]:
    """Each machine-checkable statement of verify's restart model against the broker's own restart:
    ``redispatch_from`` (the queues after the restart are those before, cut at the log's end, plus every
    reference entry at or past it), ``index_deleted`` (exactly those files are gone), the index entries it
    says stay lost (the reference entries missing after the restart), and the exit code (1 exactly when
    the broker alone loses a message or a key)."""
    model = report.get("state", {}).get("restart_model", {})
    out = []
    if not model:
        return [{"kind": "model", "ok": False, "why": "no restart_model in verify --json"}]
    said_no_start = "does not start" in json.dumps(report)
    out.append({"kind": "the broker does not start" if said_no_start else "the broker starts",
                "ok": said_no_start == (not started)})
    loses = alone.got < alone.messages or alone.found < alone.keys
    out.append({"kind": "exit 1 exactly when the broker alone loses something", "ok": (exit_code == 1) == loses,
                "exit": exit_code, "broker_alone_loses": loses})
    if not started:
        return out
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

    return out
