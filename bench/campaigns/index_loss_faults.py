"""``make faults``' ``indexloss`` part (issue 31, must-show 3): broker stores that lost IndexFiles, through
``verify --store`` and ``backfill --store``, against a restart model written here.

Bases: three generated stores of 1,400 to 2,000 messages in 4 to 6 segments, each with the index a broker
writes (one sequence of small IndexFiles, 7 or 8 of them) and its queues, made once; in one of them the clock
steps back where two files end and a segment starts, so that endTimestamps and segments' first store times
are out of order. Each case copies a base and damages it:

* the index: the newest k IndexFiles deleted (k random from 1 to all), or one file from the middle;
* the queues: intact, cut (every queue as a broker that flushed its queues up to CommitLog offset X left
  them: entries of records at or past X removed, the file keeps its size with the tail zeroed, the files
  after it deleted), or ``consumequeue/`` deleted;
* a checkpoint whose three timestamps are store times of random messages, with or without ``abort``.

The campaign's own model of the next start (RocketMQ 5.x, apache/rocketmq 8fc57f1; nothing of
rocketidx.verify is called) gives the index entries a restart would not restore:

* D, the queues' highest end: ``ConsumeQueue.recover`` walks each queue from its third-last file up to the
  first unit with offset < 0 or size <= 0; the queue's maxPhysicOffset is offset + size of the last unit
  before it (-1 for none); ``ConsumeQueueStore.getMaxPhyOffsetInConsumeQueue`` takes the highest.
* ``IndexService.load(lastExitOK=false)`` (a crash: ``abort`` is there) deletes each IndexFile whose
  endTimestamp is past the checkpoint's indexMsgTimestamp. E is the endPhyOffset of the last file left by
  name, 0 without one.
* A clean stop: ``CommitLog.recoverNormally(D)`` dispatches the records whose offset is greater than D, and
  ``start()`` resumes at ``getConfirmOffset()``, the log's end with asynchronous flush. A crash:
  ``recoverAbnormally`` dispatches every record from the base of the newest segment whose first record has
  a non-zero store time at or before max(0, min(physicMsgTimestamp, logicsMsgTimestamp) - 3000)
  (``StoreCheckpoint.getMinTimestamp``; ``messageIndexSafe`` is off by default), else from the first one.
* ``IndexService.buildIndex`` takes a dispatched record only at or past the last file's endPhyOffset.

So the index after the restart holds the entries of the files left plus the entries of the dispatched
records at or past E; what the log implies (a full rebuild's (phy_offset, key_hash) entries, as a multiset)
minus that is the loss. The restored count: of the entries the index lacks after the load (a crash's deletions
done), those the restart indexes again; with the loss, that is every entry the loaded index lacks (the record
at E, indexed twice, loses nothing).

Each case, in process: ``verify --store --json`` must report exactly that loss (``restart_model.index
.lost_entries``, also ``missing + uncovered`` of the index area), the restored count, D, E and the files the
load deletes, and call the index clean exactly when nothing is lost; ``backfill --store --targets
index,consumequeue`` must succeed, after which the model finds nothing lost, ``verify --store`` is clean,
``query`` answers every key of the log as the full rebuild does, and ``query --exact`` finds every message
of the keys the damage touched (``--exact`` reads each message it returns, about 3 ms a key here, so it is
asked for those keys and a few others; the full rebuild comparison covers every key). Anything else, or an
exception that is not rocketidx's own, is a failure with a reproducer (the damaged store, the commands).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import sys
import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass
from multiprocessing import Pool
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rocketidx.build.in_process import build_index  # noqa: E402
from rocketidx.cli import main as rocketidx_main  # noqa: E402
from rocketidx.commitlog.entries import extract_entry_keys  # noqa: E402
from rocketidx.sample.generate import GenConfig, generate_store  # noqa: E402
from rocketidx.commitlog.readers import CommitLogReader  # noqa: E402
from rocketidx.commitlog.segments import list_segments  # noqa: E402
from rocketidx.config import BuildConfig  # noqa: E402

HASH_SLOTS, INDEX_NUM, CQ_FILE_SIZE = 509, 700, 1000  # 699 entries a file: 7 to 8 files a base
SIZE_FLAGS = ["--hash-slots", str(HASH_SLOTS), "--index-num", str(INDEX_NUM)]
SEGMENT_BYTES = 96 * 1024  # 5 to 7 segments a base
BASES = {  # name -> the generator's settings
    "plain": dict(messages=2000, body_bytes=100, seed=5),
    "clock-back": dict(messages=2000, body_bytes=100, seed=6, clock_steps=3, clock_back_ms=700_000),
    "many-keys": dict(messages=1400, body_bytes=100, seed=7, keys_per_message=4, share_tx=0.3),
}
INDEX_KINDS = ("newest", "middle")
QUEUE_KINDS = ("intact", "cut", "deleted")
EXACT_KEYS = 25  # keys the damage touched asked with --exact per case (plus 5 others)

# The files' layouts, declared here from RocketMQ's IndexFile and ConsumeQueue, not taken from rocketidx.
INDEX_HEADER = np.dtype([("begin_timestamp", ">i8"), ("end_timestamp", ">i8"), ("begin_phy_offset", ">i8"),
                         ("end_phy_offset", ">i8"), ("hash_slot_count", ">i4"), ("index_count", ">i4")])  # 40 B
INDEX_ITEM = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff_s", ">i4"), ("prev_index", ">i4")])
CQ_UNIT = np.dtype([("phy_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])  # 20 B


def java_key_hash(key: str) -> int:
    """``IndexFile.indexKeyHashMethod``: Math.abs(String.hashCode()), and 0 where abs overflows."""
    h = 0
    units = key.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return 0 if h == -(1 << 31) else abs(h)


def read_index_file(path: Path) -> dict:
    raw = path.read_bytes()
    head = np.frombuffer(raw[:INDEX_HEADER.itemsize], INDEX_HEADER)[0]
    at = INDEX_HEADER.itemsize + 4 * HASH_SLOTS
    items = np.frombuffer(raw[at:at + INDEX_ITEM.itemsize * int(head["index_count"])], INDEX_ITEM)[1:]  # item 0 unused
    return {"name": path.name, "end_timestamp": int(head["end_timestamp"]), "end_phy_offset": int(head["end_phy_offset"]),
            "entries": Counter(zip(items["phy_offset"].tolist(), items["key_hash"].tolist()))}


def read_index(store: Path) -> list[dict]:
    d = store / "index"
    return [read_index_file(p) for p in sorted(d.iterdir()) if p.is_file()] if d.is_dir() else []


def queues_end(store: Path) -> int:
    """D: ``ConsumeQueue.recover`` per queue (from its third-last file), the highest maxPhysicOffset."""
    top, best = store / "consumequeue", -1
    if not top.is_dir():
        return best
    for topic in top.iterdir():
        for q in topic.iterdir() if topic.is_dir() else []:
            files = sorted(f for f in q.iterdir() if f.is_file())
            for f in files[max(0, len(files) - 3):]:
                units = np.frombuffer(f.read_bytes()[:CQ_FILE_SIZE], CQ_UNIT)
                bad = np.flatnonzero((units["phy_offset"] < 0) | (units["size"] <= 0))
                ok = units[:bad[0]] if len(bad) else units
                if len(ok):
                    best = max(best, int(ok["phy_offset"][-1]) + int(ok["size"][-1]))
                if len(bad) or len(units) * CQ_UNIT.itemsize < CQ_FILE_SIZE:
                    break
    return best


def read_checkpoint(store: Path) -> tuple[int, int, int]:
    raw = (store / "checkpoint").read_bytes()
    return tuple(int.from_bytes(raw[i:i + 8], "big", signed=True) for i in (0, 8, 16))


def write_checkpoint(store: Path, physic: int, logics: int, index: int) -> None:
    (store / "checkpoint").write_bytes(b"".join(v.to_bytes(8, "big") for v in (physic, logics, index)).ljust(4096, b"\0"))


# --- bases ---------------------------------------------------------------------------------------------

@dataclass
class Base:
    name: str
    store: Path
    files: list[dict]  # the broker's IndexFiles, oldest first
    segments: list[tuple[int, int]]  # (base offset, store time of its first record)
    rec_phy: np.ndarray  # every record's offset, in log order
    rec_ts: np.ndarray
    entry_phy: np.ndarray  # every entry the log implies: (phy_offset, key_hash, key id)
    entry_hash: np.ndarray
    entry_key: np.ndarray
    implied: Counter
    keys: list[tuple[str, str]]
    truth: list[list[int]]  # key id -> the offsets of the messages carrying it
    queries: Path  # every key, one JSON line each
    answers: list[list[int]]  # key id -> the full rebuild's answer (hash collisions included)

    def entries_from(self, lo_phy: int) -> Counter:
        m = self.entry_phy >= lo_phy
        return Counter(zip(self.entry_phy[m].tolist(), self.entry_hash[m].tolist()))


def make_bases(work: Path) -> list[Path]:
    """The stores, made once (before the workers start): CommitLog, the full build's index and queues."""
    out = []
    for name, kw in BASES.items():
        store = work / "bases" / name
        if not (store / "index").is_dir():
            shutil.rmtree(store, ignore_errors=True)
            generate_store(store, GenConfig(segment_bytes=SEGMENT_BYTES, span_ms=3_600_000, topics=4, queues=4, **kw))
            full = work / "bases" / f"{name}-full"
            cfg = BuildConfig(hash_slot_num=HASH_SLOTS, index_num=INDEX_NUM, window_ms=0, timezone="UTC",
                              targets=("index", "consumequeue"), cq_file_size=CQ_FILE_SIZE)
            manifest, _ = build_index(store, full, cfg, time_index=None)
            if name == "clock-back":
                # The clock stepped back just where the 2nd and 4th IndexFiles end and the 3rd segment starts: a
                # file whose endTimestamp is older than the one before it (a crash may delete that one and keep
                # this), and a segment whose first message is older than the previous segment's.
                ends = [f["end_phy_offset"] for f in manifest["files"]]
                step_clock_back(store, [ends[1], ends[3], 2 * SEGMENT_BYTES], 700_000)
                shutil.rmtree(full)
                build_index(store, full, cfg, time_index=None)
            shutil.copytree(full / "consumequeue", store / "consumequeue")
            shutil.copytree(full / "index", store / "index")
            shutil.rmtree(full)
            (store / "lock").touch()  # every broker store has one
        out.append(store)
    return out


def step_clock_back(store: Path, offsets: list[int], ms: int) -> None:
    """Stamp the records at ``offsets`` ``ms`` earlier (STORETIMESTAMP: after the born host, 8 or 20 bytes
    by SYSFLAG's BORNHOST_V6 bit; no CRC covers it)."""
    for off in offsets:
        seg = off // SEGMENT_BYTES * SEGMENT_BYTES
        with open(store / "commitlog" / f"{seg:020d}", "r+b") as f:
            f.seek(off - seg + 36)
            at = off - seg + (68 if int.from_bytes(f.read(4), "big") & 0x10 else 56)
            f.seek(at)
            ts = int.from_bytes(f.read(8), "big")
            f.seek(at)
            f.write((ts - ms).to_bytes(8, "big"))


def load_base(store: Path) -> Base:
    rec_phy, rec_ts, e_phy, e_key, keys, key_id = [], [], [], [], [], {}
    for batch in CommitLogReader(list_segments(store / "commitlog")):
        phy = batch.column("phy_offset").to_numpy()
        rec_phy.append(phy)
        rec_ts.append(batch.column("store_timestamp_ms").to_numpy())
        rows, _, ks = extract_entry_keys(batch)
        for p, k in zip(phy[rows].tolist(), ks.to_pylist()):
            if k not in key_id:
                key_id[k] = len(keys)
                keys.append(k)
            e_phy.append(p)
            e_key.append(key_id[k])
    rec_phy, rec_ts = np.concatenate(rec_phy), np.concatenate(rec_ts)
    first_ts = dict(zip(rec_phy.tolist(), rec_ts.tolist()))
    segments = [(s.base_offset, first_ts[s.base_offset]) for s in list_segments(store / "commitlog")]
    hashes = np.array([java_key_hash(k) for k in keys], np.int64)
    e_phy, e_key = np.array(e_phy, np.int64), np.array(e_key, np.int64)
    files = read_index(store)
    implied = Counter(zip(e_phy.tolist(), hashes[e_key].tolist()))
    held = sum((f["entries"] for f in files), Counter())
    if held != implied:  # the campaign's reading of the log and of the files must agree on the clean base
        raise AssertionError(f"base {store.name}: its full build holds {sum(held.values())} entries, the log "
                             f"implies {sum(implied.values())} ({sum((implied - held).values())} not held)")
    truth: list[list[int]] = [[] for _ in keys]
    for p, k in zip(e_phy.tolist(), e_key.tolist()):
        if not truth[k] or truth[k][-1] != p:
            truth[k].append(p)
    pairs = [tuple(k.split("#", 1)) for k in keys]
    queries = store.parent / f"{store.name}-queries.jsonl"
    if not queries.exists():
        tmp = queries.with_suffix(f".{os.getpid()}")
        tmp.write_text("".join(json.dumps({"topic": t, "key": k}) + "\n" for t, k in pairs))
        os.replace(tmp, queries)
    code, answers, _ = query(store, queries)
    if code != 0 or len(answers) != len(keys):
        raise AssertionError(f"base {store.name}: query exit {code}, {len(answers)} answers of {len(keys)}")
    for k, (t, o) in enumerate(zip(truth, answers)):
        if not set(t) <= set(o):
            raise AssertionError(f"base {store.name}: the full build does not find {pairs[k]}: {o} against {t}")
    return Base(store.name, store, files, segments, rec_phy, rec_ts, e_phy, hashes[e_key], e_key, implied, pairs,
                truth, queries, answers)


# --- the commands, in process ----------------------------------------------------------------------------

def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = rocketidx_main(argv)
    return code, out.getvalue(), err.getvalue()


def query(store: Path, queries: Path, exact: bool = False) -> tuple[int, list[list[int]], str]:
    code, out, err = run_cli(["query", "--store", str(store), "--queries", str(queries)] + SIZE_FLAGS
                             + (["--exact"] if exact else []))
    return code, [json.loads(line)["offsets"] for line in out.splitlines() if line.strip()], err


def verify(store: Path) -> tuple[int, dict | None, str]:
    code, out, err = run_cli(["verify", "--store", str(store), "--json", "--in-process"] + SIZE_FLAGS)
    try:
        return code, json.loads(out), err
    except ValueError:
        return code, None, err + out[-2000:]


BACKFILL = ["--targets", "index,consumequeue", "--in-process", "--timezone", "UTC", "--cq-file-size",
            str(CQ_FILE_SIZE)] + SIZE_FLAGS


# --- the model ------------------------------------------------------------------------------------------

def restart_model(store: Path, base: Base) -> dict:
    """What the next start leaves in the index (the module docstring), from the store's files as they are."""
    files = read_index(store)
    abort = (store / "abort").exists()
    physic, logics, index_ts = read_checkpoint(store)
    D = queues_end(store)
    if abort:  # IndexService.load(false)
        kept = [f for f in files if f["end_timestamp"] <= index_ts]
        min_ts = max(0, min(physic, logics) - 3000)
        start = next((b for b, ts in reversed(base.segments) if ts != 0 and ts <= min_ts), base.segments[0][0])
        dispatched = base.rec_phy[base.rec_phy >= start]
    else:
        kept = files
        dispatched = base.rec_phy[base.rec_phy > D]
    names = {f["name"] for f in kept}
    E = kept[-1]["end_phy_offset"] if kept else 0
    taken = dispatched[dispatched >= E]
    restored = base.entries_from(int(taken[0])) if len(taken) else Counter()  # dispatch runs to the log's end
    loaded = sum((f["entries"] for f in kept), Counter())
    lacking = base.implied - sum((f["entries"] for f in files), Counter())
    return {"kind": "crash" if abort else "clean", "D": D, "E": E,
            "deleted": sorted(f["name"] for f in files if f["name"] not in names),
            "dispatch_from": int(dispatched[0]) if len(dispatched) else None,
            "lost": sum((base.implied - (loaded + restored)).values()),
            # Of the entries the index lacks after the load (the files a crash deletes are gone by then), those
            # the restart indexes again: with the loss, every entry the loaded index lacks.
            "restored": sum(((base.implied - loaded) & restored).values()),
            "restored_of_now": sum((lacking & restored).values()),  # the same, of what the files lack now
            "lacking": lacking, "crash_deleted": [f for f in files if f["name"] not in names]}


# --- one case -------------------------------------------------------------------------------------------

def damage(c: int, rng: random.Random, base: Base, store: Path) -> dict:
    """Copy the base and damage it as case ``c`` says; returns what was done."""
    (store / "commitlog").mkdir(parents=True)
    for s in (base.store / "commitlog").iterdir():
        os.link(s, store / "commitlog" / s.name)  # never written
    shutil.copytree(base.store / "index", store / "index")
    shutil.copytree(base.store / "consumequeue", store / "consumequeue")
    (store / "lock").touch()
    ik, qk, crash = INDEX_KINDS[c % 2], QUEUE_KINDS[c // 2 % 3], c // 6 % 2 == 1
    names = [f["name"] for f in base.files]
    if ik == "newest":
        k = rng.randint(1, len(names))
        gone = names[len(names) - k:]
    else:
        gone = [names[rng.randint(1, len(names) - 2)]]
    for n in gone:
        (store / "index" / n).unlink()
    done = {"index": ik, "deleted": gone, "queues": qk, "crash": crash}
    if qk == "deleted":
        shutil.rmtree(store / "consumequeue")
    elif qk == "cut":
        done["cut_at"] = cut = int(rng.choice(base.rec_phy.tolist()))
        done["empty_files"] = keep_empty = rng.random() < 0.5
        cut_queues(store, cut, keep_empty)
    ts = base.rec_ts.tolist()
    done["checkpoint"] = cp = [int(rng.choice(ts)) for _ in range(3)]
    write_checkpoint(store, *cp)
    if crash:
        (store / "abort").touch()
    return done


def cut_queues(store: Path, cut: int, keep_empty: bool) -> None:
    """Every queue as flushed up to ``cut``: units of records at or past it zeroed, later files deleted (a
    file left with no unit, other than the queue's first, kept all zero when ``keep_empty``)."""
    for topic in (store / "consumequeue").iterdir():
        for q in topic.iterdir():
            files, gone = sorted(q.iterdir()), False
            for i, f in enumerate(files):
                if gone:
                    f.unlink()
                    continue
                units = np.frombuffer(f.read_bytes(), CQ_UNIT).copy()
                past = np.flatnonzero((units["phy_offset"] >= cut) & (units["size"] > 0))
                if not len(past):
                    continue
                gone = True
                units[past[0]:] = np.zeros(1, CQ_UNIT)
                if past[0] == 0 and i > 0 and not keep_empty:
                    f.unlink()
                else:
                    f.write_bytes(units.tobytes())


class Failure(Exception):
    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind  # what disagreed, in a few words, for the counts


def one_case(c: int, seed: int, bases: list[Base], work: Path) -> tuple[Counter | list[str], dict | None]:
    """Case ``c``: the outcomes to count, and a failure (with its reproducer's directory) or None."""
    rng = random.Random(seed * 7_919 + c)
    base = bases[c // 12 % len(bases)]
    store, kept = work / f"s{c}", work / f"damaged-{c}"
    step, done, model, cmds, disagreement = "damage", {}, None, [], None
    try:
        done = damage(c, rng, base, store)
        label = f"{done['index']}/{done['queues']}/{'crash' if done['crash'] else 'clean'}"
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(store, kept, copy_function=lambda a, b: os.link(a, b) if "/commitlog/" in a
                        else shutil.copy2(a, b))  # the reproducer, if this case fails
        step = "model"
        model = restart_model(store, base)
        step = "verify --store"
        cmds.append(["rocketidx", "verify", "--store", "STORE", "--json", "--in-process"] + SIZE_FLAGS)
        code, report, err = verify(store)
        if report is None:
            raise Failure(f"verify exit {code}, no JSON: {err.strip()[-500:]}")
        rm = report["state"]["restart_model"]
        # No index area, no restart_model.index: verify judged nothing of the index (a disagreement if the
        # model finds entries lost or restored).
        area = report["areas"].get("index", {"clean": True, "counts": {}})
        counts, ri = area["counts"], rm.get("index", {})
        got = {"kind": rm["kind"], "D": rm["dispatch_from_phy_offset"], "E": ri.get("end_phy_offset", 0),
               "deleted": sorted(ri.get("deleted_files", [])), "lost": ri.get("lost_entries", 0),
               "restored": ri.get("restored_entries", 0)}
        want = {k: model[k] for k in got}
        wrong = {k: f"{k} {got[k]} (model {want[k]})" for k in got if got[k] != want[k]}
        if counts.get("missing", 0) + counts.get("uncovered", 0) != got["lost"]:
            wrong["missing+uncovered"] = f"missing+uncovered {dict(counts)} against lost_entries {got['lost']}"
        if area["clean"] != (model["lost"] == 0):
            wrong["index clean"] = f"index area clean={area['clean']}"
        if code != (0 if report["clean"] else 1):
            wrong["exit"] = f"exit {code} with clean={report['clean']}"
        if "index" not in report["areas"]:
            wrong["no index area"] = "no index area in the report"
        if wrong:
            # counted, and the repair still checked: its failures are counted apart
            disagreement = Failure(f"verify disagrees with the model: {'; '.join(wrong.values())}", ", ".join(wrong))
        step = "backfill"
        cmds.append(["rocketidx", "backfill", "--store", "STORE"] + BACKFILL)
        code, out, err = run_cli(["backfill", "--store", str(store)] + BACKFILL)
        if code != 0:
            raise Failure(f"backfill exit {code}: {err.strip()[-500:]}", f"exit {code}")
        step = "after the repair"
        after = restart_model(store, base)
        if after["lost"]:
            raise Failure(f"the model finds {after['lost']} entries a restart of the repaired store loses "
                          f"({ {k: after[k] for k in ('kind', 'D', 'E', 'deleted')} })", "the model finds entries lost")
        code, report2, err = verify(store)
        if code != 0 or report2 is None or not report2["clean"]:
            bad = {a: dict(v["counts"]) for a, v in (report2 or {}).get("areas", {}).items() if not v["clean"]}
            raise Failure(f"verify --store after the repair: exit {code}, not clean: {bad or err.strip()[-300:]}",
                          "verify not clean")
        cmds.append(["rocketidx", "query", "--store", "STORE", "--queries", "ALL-KEYS"] + SIZE_FLAGS)
        code, answers, err = query(store, base.queries)
        if code != 0 or answers != base.answers:
            diff = [base.keys[k] for k, (a, b) in enumerate(zip(answers, base.answers)) if a != b]
            raise Failure(f"query after the repair: exit {code}, {len(answers)} answers, {len(diff)} differ from "
                          f"the full rebuild's: {diff[:3]} {err.strip()[-200:]}", "query answers differ")
        touched = lacking_keys(base, model)
        ask = rng.sample(touched, min(EXACT_KEYS, len(touched))) + rng.sample(range(len(base.keys)), 5)
        qfile = work / f"q{c}.jsonl"
        qfile.write_text("".join(json.dumps({"topic": base.keys[k][0], "key": base.keys[k][1]}) + "\n" for k in ask))
        cmds.append(["rocketidx", "query", "--store", "STORE", "--queries", "KEYS", "--exact"] + SIZE_FLAGS)
        code, exact, err = query(store, qfile, exact=True)
        qfile.unlink()
        # The full rebuild's answer without the collisions: a message that carries the key twice is there twice.
        lost = [base.keys[k] for k, got_k in zip(ask, exact)
                if got_k != [o for o in base.answers[k] if o in set(base.truth[k])] or set(got_k) != set(base.truth[k])]
        if code != 0 or len(exact) != len(ask) or lost:
            raise Failure(f"query --exact after the repair: exit {code}, {len(lost)} of {len(ask)} keys answered "
                          f"other than the log: {lost[:3]} {err.strip()[-200:]}", "query --exact answers differ")
        if disagreement is not None:
            step = "verify --store"
            raise disagreement
        outcome = [f"{label}: model = verify = repaired store"]
        outcome.append(f"{label}: {'entries lost' if model['lost'] else 'nothing lost'}"
                       f"{', some restored' if model['restored'] else ''}")
        now = {p.name for p in (store / "index").iterdir()}
        names = [f["name"] for f in base.files]
        how = sorted({file_difference(store / "index" / n, base.store / "index" / n) for n in names if n in now}
                     - {None})
        files = ("every file the broker's byte for byte" if not how and now == set(names) else
                 f"names {sorted(now ^ set(names))} other than the broker's" if now != set(names) else
                 "the broker's names, some files differ: " + "; ".join(how))
        if done["index"] == "middle":
            [m] = done["deleted"]
            outcome.append(f"middle file: {'rebuilt under its own name' if m in now else 'not rebuilt'}; {files}")
        else:
            outcome.append(f"newest files: after the repair {files}")
        return Counter(outcome) + Counter({"entries summed over the cases: lost (a restart would not restore them)":
                                           model["lost"], "entries summed over the cases: restored by the restart":
                                           model["restored"]}), None
    except Exception as e:
        fail = {"part": "indexloss", "case": c, "base": base.name, "damage": done, "step": step,
                "model": {k: v for k, v in (model or {}).items() if k not in ("lacking", "crash_deleted")},
                "commands": cmds, "dir": str(kept),
                "error": str(e) if isinstance(e, Failure) else traceback.format_exc(limit=10)}
        what = (f": {e.kind}" if e.kind else "") if isinstance(e, Failure) else " (untyped exception)"
        labels = [f"FAILURE {step}{what}"]
        if disagreement is not None and e is not disagreement:  # verify disagreed, and then the repair failed
            labels.append(f"FAILURE verify --store: {disagreement.kind}")
            fail["error"] = f"{disagreement}\n{fail['error']}"
        return labels, fail
    finally:
        shutil.rmtree(store, ignore_errors=True)


def file_difference(a: Path, b: Path) -> str | None:
    """Where IndexFile ``a`` differs from ``b`` (None: not at all), in a few words."""
    x, y = np.frombuffer(a.read_bytes(), np.uint8), np.frombuffer(b.read_bytes(), np.uint8)
    if len(x) != len(y):
        return "sizes"
    at = np.flatnonzero(x != y)
    if not len(at):
        return None
    items = INDEX_HEADER.itemsize + 4 * HASH_SLOTS
    if at[0] < INDEX_HEADER.itemsize:
        return "headers"
    if at[0] < items:
        return "hash slots"
    item, within = np.divmod(at - items, INDEX_ITEM.itemsize)
    diff_at = INDEX_ITEM.fields["time_diff_s"][1]
    if set(item.tolist()) == {1} and ((within >= diff_at) & (within < diff_at + 4)).all():
        return "the first item's time_diff_s only"
    return f"items from item {int(item[0])}"


def lacking_keys(base: Base, model: dict) -> list[int]:
    """Key ids with an entry the damaged index lacked, or that the crash's load would delete."""
    pairs = set(model["lacking"])
    for f in model["crash_deleted"]:
        pairs |= set(f["entries"])
    m = np.fromiter(((p, h) in pairs for p, h in zip(base.entry_phy.tolist(), base.entry_hash.tolist())), bool,
                    len(base.entry_phy))
    return sorted(set(base.entry_key[m].tolist()))


# --- the part -------------------------------------------------------------------------------------------

_STATE: dict = {}


def _init(seed: int, work: str, stores: list[str]) -> None:
    tempfile.tempdir = work  # verify --store rebuilds in a temporary directory: tmpfs when the work is there
    _STATE.update(seed=seed, work=Path(work), bases=[load_base(Path(s)) for s in stores])


def _worker(chunk: range) -> tuple[Counter, list[dict]]:
    counts, failures = Counter(), []
    for c in chunk:
        outcome, fail = one_case(c, _STATE["seed"], _STATE["bases"], _STATE["work"])
        counts.update(outcome)
        if fail:
            failures.append(fail)
        else:
            shutil.rmtree(_STATE["work"] / f"damaged-{c}", ignore_errors=True)
    return counts, failures


def run_index_loss(cases: int, seed: int, work: Path, workers: int = 2) -> tuple[Counter, list[dict]]:
    """``cases`` damaged stores (module docstring): counts per outcome, and the failures (each with ``dir``,
    its damaged store, for :func:`faults._keep`)."""
    stores = [str(s) for s in make_bases(work)]
    counts, failures = Counter(), []
    step = 12  # one chunk covers every (index, queues, crash) kind once
    chunks = [range(i, min(cases, i + step)) for i in range(0, cases, step)]
    if workers <= 1:
        _init(seed, str(work), stores)
        results = map(_worker, chunks)
    else:
        pool = Pool(workers, initializer=_init, initargs=(seed, str(work), stores))
        results = pool.imap_unordered(_worker, chunks)
    try:
        for n, (cnt, fails) in enumerate(results, 1):
            counts.update(cnt)
            failures.extend(fails)
            if n % 20 == 0:
                print(f"  indexloss: {min(cases, n * step):,} of {cases:,} cases, {len(failures)} failure(s)",
                      flush=True)
    finally:
        if workers > 1:
            pool.close()
            pool.join()
    return counts, failures
