"""``make faults``' ``stores`` part: damaged broker stores through ``verify --store`` and ``backfill``, and
``backfill`` killed with -9 in the middle of its repairs.

Bases: every reference case as a broker leaves it (its CommitLog, RocketMQ's IndexFiles and queues), and a
generated store with the index and queues rocketidx builds; half of the cases carry a checkpoint and an
``abort`` file (a crash whose queue flush fell behind). Each case copies a base and does one or two damages
to its queues: the ``queues`` part's kinds (flipped bytes, zeroed entries, truncated, extended, deleted and
junk files, dirty tails, swapped, deleted and unexplained queues) and the issue's crash scenarios
(``consumequeue/`` deleted, a crash across two segments, entries copied from another broker). Then, in
process:

* ``verify --store`` (:func:`verify_store`): the index must be clean (it is not damaged: a report is a false
  one), and whether it reports the queues, or counts entries the broker's restart would restore, is the
  verdict;
* ``backfill --targets index,consumequeue`` (:func:`repair_store`): either a typed one-line refusal (then the
  store must be unchanged and verify must have reported the queues) or a repair, whose plan changes something
  exactly when verify reported the queues (a disagreement is a failure), after which the queues are the
  clean base's byte for byte, the index keeps its inodes, and ``logicsMsgTimestamp`` is the newest entry's.

An exception that is not rocketidx's own is a failure. The kills: a store of ``--kill-messages`` messages
whose queues lost their newest files and one queue, ``rocketidx backfill --targets index,consumequeue`` killed
at random moments; after each kill every file the store had is in place or in a backup, and the next run
(which rolls back or finishes) leaves exactly what an uninterrupted repair leaves.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from multiprocessing import Pool
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "bench" / "campaigns"))

from cq_faults import KINDS as QUEUE_KINDS, _log_end, damage  # noqa: E402
from store_scenarios import scenario  # noqa: E402

from rocketidx.backfill.repair import repair_store  # noqa: E402
from rocketidx.build.in_process import build_index  # noqa: E402
from rocketidx.sample.generate import GenConfig, generate_store  # noqa: E402
from rocketidx.config import BuildConfig  # noqa: E402
from rocketidx.errors import RocketIdxError  # noqa: E402
from rocketidx.broker.store import read_checkpoint  # noqa: E402
from rocketidx.verify.store import verify_store  # noqa: E402

GOLDEN = ROOT / "tests" / "reference" / "golden"
STORE_KINDS = ("consumequeue-deleted", "crash-across-segments", "copied-from-another-broker")
KINDS = QUEUE_KINDS + STORE_KINDS
SECOND_KINDS = ("flip-phy", "flip-size", "flip-tags", "zero-entry", "delete-newest", "dirty-tail", "delete-queue",
                "extra-queue")
CQ_FILE_SIZE = 1280  # every base's queue files


def store_bases(work: Path) -> list[dict]:
    """Each base: its name, a clean store directory, the sizes, the window and the newest entry's store time."""
    out = []
    for c in sorted(GOLDEN.iterdir()):
        if not (c / "expected" / "consumequeue").is_dir():
            continue
        meta = json.loads((c / "case.json").read_text())
        store = work / "bases" / c.name
        if not store.exists():
            shutil.copytree(c / "commitlog", store / "commitlog")
            shutil.copytree(c / "expected" / "index", store / "index")
            shutil.copytree(c / "expected" / "consumequeue", store / "consumequeue")
        out.append({"name": c.name, "store": store, "case": c, "window": meta["windowMillis"],
                    "sizes": {"hash_slot_num": meta["hashSlotNum"], "index_num": meta["indexNum"]}})
    store = work / "bases" / "generated"
    if not store.exists():
        generate_store(store, GenConfig(messages=4000, segment_bytes=256 * 1024, body_bytes=60, topics=5, queues=8,
                                        seed=11))
        built = work / "gen-out"
        build_index(store, built, BuildConfig(timezone="UTC", window_ms=0, hash_slot_num=1009, index_num=12000,
                                              targets=("index", "consumequeue"), cq_file_size=CQ_FILE_SIZE),
                    time_index=None)
        shutil.copytree(built / "index", store / "index")
        shutil.copytree(built / "consumequeue", store / "consumequeue")
        shutil.rmtree(built)
    out.append({"name": "generated", "store": store, "case": None, "window": 0,
                "sizes": {"hash_slot_num": 1009, "index_num": 12000}})
    for b in out:
        b["log_end"] = _log_end(b["store"] / "commitlog")
        b["queues"] = _tree(b["store"] / "consumequeue")
        b["newest"] = _newest_entry_time(b["store"])
    return out


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} \
        if root.is_dir() else {}


def _newest_entry_time(store: Path) -> int:
    """The store time of the last record that makes a queue entry, from the log itself."""
    from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS, dispatch
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import list_segments
    import rocketidx.layout as L
    newest = None
    for seg, buf, recs in CommitLogReader(list_segments(store / "commitlog")).record_chunks():
        d = dispatch(buf, seg, recs, DEFAULT_DELAYS_MS)
        if len(d):
            newest = int(recs[recs[:, L.REC_POS] == d.position[-1], L.REC_STORE_TS][0])
    return newest


def _copy(base: Path, to: Path) -> None:
    (to / "commitlog").mkdir(parents=True)
    for s in (base / "commitlog").iterdir():
        os.link(s, to / "commitlog" / s.name)  # never written: the damage is to the queues
    shutil.copytree(base / "index", to / "index")
    shutil.copytree(base / "consumequeue", to / "consumequeue")


def _checkpoint(physic: int, logics: int, index: int) -> bytes:
    return (physic.to_bytes(8, "big") + logics.to_bytes(8, "big") + index.to_bytes(8, "big")).ljust(4096, b"\0")


def _do(kind: str, store: Path, base: dict, rng: random.Random) -> str | None:
    if kind in QUEUE_KINDS:
        return damage(store / "consumequeue", kind, base["log_end"], rng)
    scenario(kind, store, base["case"] or store)
    return kind


def one_store(c: int, seed: int, bases: list[dict], work: Path) -> tuple[list[str], dict | None]:
    """One damaged store: (what happened, a failure or None)."""
    rng = random.Random(seed * 7_919 + c)
    base = rng.choice(bases)
    # A second damage, sometimes, done first: one that leaves well-formed queue files for the first to work on.
    first = KINDS[c % len(KINDS)]
    kinds = [first] + ([rng.choice([k for k in SECOND_KINDS if k != first])] if rng.random() < 0.3 else [])
    store = work / f"s{c}"
    _copy(base["store"], store)
    crashed = rng.random() < 0.5
    if crashed:
        (store / "checkpoint").write_bytes(_checkpoint(base["newest"] + 10**6, 1, 2**62))
        (store / "abort").write_bytes(b"")
    step, outcome = "damage", []
    try:
        done = [_do(k, store, base, rng) for k in kinds[1:]] + [None]
        done = [_do(kinds[0], store, base, rng)] + done[:-1]
        if done[0] is None:
            return [f"{kinds[0]}: base cannot take it (skipped)"], None
        label = "+".join(k for k, d in zip(kinds, done) if d is not None)
        step = "verify --store"
        report = verify_store(store, cq_file_size=CQ_FILE_SIZE, **base["sizes"])
        if not report.areas["index"].clean:
            raise Failure(f"false report on the intact index: {dict(report.areas['index'].counts)}")
        # Entries the broker's restart would put back (a deleted queue, the newest files) are state, not
        # problems (verify/queues.py's QueueRestart): the repair writes them too, so either one is the verdict.
        restored = report.state.get("restart_model", {}).get("consumequeue", {}).get("restored_entries", 0)
        reported = not report.areas["consumequeue"].clean or restored > 0
        # Queues no rebuild makes (issue 31: extra-queue's queue 99) are listed apart, never problems, and the
        # repair leaves them as they are: the clean base plus exactly those files is where it must end.
        unexplained = set(report.state.get("unexplained_queues", {}))
        kept = {k: v for k, v in _tree(store / "consumequeue").items()
                if k.rsplit("/", 1)[0] in unexplained}
        if unexplained:
            outcome.append(f"{kinds[0]}: verify listed {len(unexplained)} queue(s) apart as unexplained")
        if not reported and _tree(store / "consumequeue") == base["queues"] | kept:
            outcome.append(f"{kinds[0]}: no damage left (the second undid it: {label}), verify clean")
        else:
            outcome.append(f"{kinds[0]}: verify {'CLEAN' if not reported else 'reported' if not report.areas['consumequeue'].clean else 'found only entries a restart restores'}")
        before = _tree(store)
        step = "backfill"
        index_inodes = {p.name: p.stat().st_ino for p in (store / "index").iterdir()}
        try:
            r = repair_store(store, cq_file_size=CQ_FILE_SIZE, window_ms=base["window"], timezone_name="UTC",
                             log=lambda *_: None, **base["sizes"])
        except RocketIdxError as e:
            if "\n" in str(e):
                raise Failure(f"a refusal of more than one line: {e}")
            if _tree(store) != {k: v for k, v in before.items()} or not reported:
                raise Failure(f"refused ({e}) but {'changed the store' if _tree(store) != before else 'verify was clean'}")
            why = str(e).split(": ", 1)[-1].split(" (")[0][:70]
            outcome.append(f"{kinds[0]}: backfill refused ({type(e).__name__}: {why}), nothing changed")
            return outcome, None
        changed = r.queues.plan.changes > 0
        if changed != reported:
            raise Failure(f"disagreement: verify {'reported' if reported else 'found nothing'}, the repair "
                          f"{'changed' if changed else 'kept'} the queues ({label}; {dict(report.areas['consumequeue'].counts)})")
        step = "after the repair"
        if _tree(store / "consumequeue") != base["queues"] | kept:
            raise Failure(f"the repaired queues are not the clean base's (with the unexplained ones kept) ({label})")
        if {p.name: p.stat().st_ino for p in (store / "index").iterdir()} != index_inodes or not r.index.plan.nothing_to_do:
            raise Failure("the repair touched the intact index")
        if crashed and changed and read_checkpoint(store)["logics_msg_timestamp_ms"] != base["newest"]:
            raise Failure(f"logicsMsgTimestamp {read_checkpoint(store)['logics_msg_timestamp_ms']}, the newest "
                          f"entry's store time is {base['newest']}")
        if c % 10 == 0 and not verify_store(store, cq_file_size=CQ_FILE_SIZE, **base["sizes"]).clean:
            raise Failure("verify --store is not clean after the repair")
        outcome.append(f"{kinds[0]}: backfill {'repaired' if changed else 'kept'} the queues, identical to the clean base")
        return outcome, None
    except Failure as e:
        return [f"FAILURE {step}"], {"part": "stores", "case": c, "kinds": kinds, "base": base["name"],
                                     "step": step, "error": str(e)}
    except Exception:
        return [f"FAILURE {step} (untyped exception)"], {"part": "stores", "case": c, "kinds": kinds,
                                                         "base": base["name"], "step": step,
                                                         "error": traceback.format_exc(limit=8)}
    finally:
        shutil.rmtree(store, ignore_errors=True)


class Failure(Exception):
    pass


_STATE: dict = {}


def _init(seed: int, work: str) -> None:
    # verify --store rebuilds in a temporary directory and fsyncs it: there too tmpfs when the work is there,
    # so the campaign measures the code rather than the disk.
    tempfile.tempdir = work
    _STATE.update(seed=seed, work=Path(work), bases=store_bases(Path(work)))


def _worker(chunk: range) -> tuple[Counter, list[dict]]:
    counts, failures = Counter(), []
    for c in chunk:
        outcome, fail = one_store(c, _STATE["seed"], _STATE["bases"], _STATE["work"])
        counts.update(outcome)
        if fail:
            failures.append(fail)
    return counts, failures


def run_stores(cases: int, seed: int, work: Path, workers: int = 2) -> tuple[Counter, list[dict]]:
    store_bases(work)  # made once, before the workers read them
    counts, failures = Counter(), []
    chunks = [range(i, min(cases, i + 200)) for i in range(0, cases, 200)]
    with Pool(workers, initializer=_init, initargs=(seed, str(work))) as pool:
        for n, (cnt, fails) in enumerate(pool.imap_unordered(_worker, chunks), 1):
            counts.update(cnt)
            failures.extend(fails)
            if n % 10 == 0:
                print(f"  stores: {min(cases, n * 200):,} of {cases:,} cases, {len(failures)} failure(s)", flush=True)
    return counts, failures


# --- kill -9 during repairs ---------------------------------------------------------------------------

def run_repair_kills(kills: int, messages: int, seed: int, work: Path, ridx: list[str], kill_after) -> tuple[Counter, list[dict]]:
    """``kill_after(cmd, delay)``: run and SIGKILL the process group after ``delay`` s (exit code, -9 if killed)."""
    rng = random.Random(seed)
    counts, failures = Counter(), []
    base = work / "kill-base"
    generate_store(base, GenConfig(messages=messages, segment_bytes=8 * 1024 * 1024, body_bytes=200, topics=6,
                                   queues=8, seed=seed))
    built = work / "kill-built"
    build_index(base, built, BuildConfig(timezone="UTC", window_ms=0, targets=("index", "consumequeue"),
                                         hash_slot_num=50_021, index_num=400_000, cq_file_size=20_000),
                time_index=None)
    shutil.copytree(built / "index", base / "index")
    shutil.copytree(built / "consumequeue", base / "consumequeue")
    want_queues = _tree(base / "consumequeue")
    newest = _newest_entry_time(base)
    (base / "checkpoint").write_bytes(_checkpoint(newest + 10**6, 1, 2**62))
    (base / "abort").write_bytes(b"")
    queues = sorted(q for t in (base / "consumequeue").iterdir() for q in t.iterdir())
    shutil.rmtree(queues[0])  # the crash: one queue lost, the newest files of the others
    for q in queues[1:]:
        files = sorted(q.iterdir())
        for f in files[-2:] if len(files) > 2 else []:
            f.unlink()
    for q in queues[1::2]:  # and a wrong byte in every file of half the queues: a swap of many renames
        for f in sorted(q.iterdir()):
            with open(f, "r+b") as fh:
                fh.seek(12)
                b = fh.read(1)[0]
                fh.seek(12)
                fh.write(bytes([b ^ 1]))
    damaged = work / "kill-damaged"
    shutil.copytree(base, damaged)
    store = work / "kill-store"
    cmd = ridx + ["backfill", "--store", str(store), "--targets", "index,consumequeue", "--in-process",
                  "--timezone", "UTC", "--hash-slots", "50021", "--index-num", "400000"]

    def fresh() -> None:
        shutil.rmtree(store, ignore_errors=True)
        shutil.copytree(damaged, store, copy_function=lambda s, d: os.link(s, d) if "/commitlog/" in s
                        else shutil.copy2(s, d))

    fresh()
    t, t_wall = time.monotonic(), time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    took = time.monotonic() - t
    # The swap's moments (its journal's), so that half the kills land in or next to it: the rest are
    # spread over the whole run, which is mostly the build.
    [journal] = [json.loads(j.read_text()) for j in (store / "consumequeue.backup").glob("*/journal.json")]
    swap = (journal["started"] - t_wall, journal["finished"] - t_wall)
    want = {k: v for k, v in _tree(store).items() if not k.startswith(("consumequeue.backup", "lock"))}
    if _tree(store / "consumequeue") != want_queues:
        failures.append({"part": "stores", "case": "kill-reference", "error": "the uninterrupted repair is not the build's"})
        return counts, failures
    for k in range(kills):
        fresh()
        before = _tree(store)
        delay = rng.uniform(0.05, took * 0.95) if k % 2 else rng.uniform(swap[0] - 0.02, swap[1] + 0.02)
        code = kill_after(cmd, delay)
        step = "after the kill"
        try:
            backups = sorted((store / "consumequeue.backup").glob("*/consumequeue")) \
                if (store / "consumequeue.backup").is_dir() else []
            for rel, data in before.items():
                if not rel.startswith("consumequeue/"):
                    continue
                places = [store / rel] + [b / rel.split("/", 1)[1] for b in backups]
                if not any(p.is_file() and p.read_bytes() == data for p in places):
                    raise Failure(f"{rel} is neither in place nor in a backup after a kill at {delay:.2f} s")
            cp = (store / "checkpoint").read_bytes()
            if cp not in (before["checkpoint"], want["checkpoint"]):
                raise Failure("the checkpoint is neither the old one nor the finished repair's")
            journals = [json.loads(j.read_text()) for j in (store / "consumequeue.backup").glob("*/journal.json")] \
                if (store / "consumequeue.backup").is_dir() else []
            phase = ("finished before the kill" if code != -9 else
                     "killed during the swap" if any("finished" not in j for j in journals) else
                     "killed after the swap" if journals else "killed before the swap")
            step = "rerun"
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            got = {k2: v for k2, v in _tree(store).items() if not k2.startswith(("consumequeue.backup", "lock"))}
            if got != want:
                diff = sorted(n for n in set(got) | set(want) if got.get(n) != want.get(n))
                raise Failure(f"after the rerun the store differs from an uninterrupted repair's: {diff[:5]}")
            counts[f"repair {phase}: nothing lost, the rerun ends where an uninterrupted repair does"] += 1
        except Exception as e:
            counts[f"FAILURE repair kill {step}"] += 1
            failures.append({"part": "stores", "case": f"kill-{k}", "delay": round(delay, 3), "step": step,
                             "error": str(e) if isinstance(e, Failure) else traceback.format_exc(limit=8)})
    counts[f"uninterrupted repair: {took:.2f} s, its swap {swap[0]:.2f} to {swap[1]:.2f} s"] += 1
    return counts, failures
