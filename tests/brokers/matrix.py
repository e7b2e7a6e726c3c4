"""Real brokers against rocketidx, one version after another: send a workload to a broker, read every queue
back with a consumer, ask the broker's own index for keys, stop the broker cleanly, then rebuild its
IndexFiles and ConsumeQueues from its CommitLog with ``rocketidx build`` and compare, byte for byte, and
ask rocketidx the same keys.

    cd tests && ../.venv/bin/python -m brokers.matrix [--versions V ...] [--messages N] [--work DIR] [--keep]
                                                      [--json PATH]

Prints one line per version::

    V: consumequeue a/b identical, index c/d identical (e empty trailing broker file(s) left out),
       queries f/g identical, messages sent h, read by consumer i

and, for every difference, the first differing bytes decoded (IndexFile header field, hash slot or
20-byte item; ConsumeQueue 20-byte entry). ``--json`` writes the whole summary.

Query answers are compared as the admin client sees them: the broker's answer is the driver's
``queryMessage`` / ``queryMessageByUniqKey`` list (the broker takes up to maxNum offsets from its
IndexFiles, sorts them ascending and returns the records; the client keeps, for a key, the records of
the topic whose KEYS hold the key, and for a unique key the records whose message id is the key, on 4.9
only the earliest). rocketidx's answer is ``rocketidx query --queries FILE`` on the rebuilt index (one
process for every key, hash collisions included, newest first) put through that same client rule here,
with the records decoded from the CommitLog by this module, not by rocketidx. A unique-key query is
asked with maxNum 32 on both sides: the broker replaces any maxNum of a unique-key request by its
defaultQueryMaxNum, 32 (QueryMessageProcessor).
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from brokers import compare, harness
from brokers.harness import Cluster, HarnessError, major, run_driver, versions

REPO = Path(__file__).resolve().parents[2]
QUERY_CAP = 1500
KEY_MAX_NUM = 64        # what the driver asks for a key
UNIQ_MAX_NUM = 32       # what the broker answers a unique-key request with: defaultQueryMaxNum
NO_MESSAGE = "but no message"  # MQClientException NO_MESSAGE: the client's empty answer


def rocketidx_bin() -> str:
    for cand in (REPO / ".venv" / "bin" / "rocketidx", Path(sys.executable).parent / "rocketidx"):
        if cand.exists():
            return str(cand)
    found = shutil.which("rocketidx")
    if found:
        return found
    raise SystemExit("rocketidx is not installed: expected .venv/bin/rocketidx")


def rocketidx(*args: str, timeout: float = 900.0) -> subprocess.CompletedProcess:
    return subprocess.run([rocketidx_bin(), *args], capture_output=True, text=True, timeout=timeout)


def has_flag(command: str, flag: str) -> bool:
    """Whether ``rocketidx COMMAND --help`` lists FLAG (flags land while this runs)."""
    run = rocketidx(command, "--help", timeout=120)
    return any(word.strip("[],") == flag for word in run.stdout.split())


def send_flags(version: str, conf: dict | None = None) -> list[str]:
    """Timer messages and the over-long consumer group exist on 5.x only; with enableMultiDispatch the
    workload names light queues (and on 4.9, whose client does not refuse it, one name holding '/')."""
    flags = ["timer", "longgroup"] if major(version) >= 5 else []
    if (conf or {}).get("rocketidxBatchCQ") and major(version) >= 5:
        flags.append("batchcq")
    if str((conf or {}).get("enableMultiDispatch", "")).lower() == "true":
        flags += ["lmq"] + (["lmqslash"] if major(version) < 5 else [])
    return flags


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ----------------------------------------------------------------------------------------------------------
# Which keys to ask

def pick_queries(sent: list[dict], cap: int = QUERY_CAP, seed: int = 1,
                 read: list[dict] = ()) -> list[tuple[str, str, str]]:
    """(topic, key, kind) lines: every distinct (topic, KEYS word) of the messages the broker took, and the
    message id (kind ``uniq``) of a sample: every message of a rare kind (delay, timer, batch, transaction,
    retry), then plain ones. At most ``cap`` lines; when the keys alone would pass it, the keys several
    messages share are kept and the rest sampled.

    The ids the consumer read in the sent topics that no send returned come first among the unique keys:
    on 5.x the broker appends a batch's own properties, its UNIQ_KEY among them, after each message's, so
    every message of a batch is stored (and indexed) under the batch's id, not the one the producer was
    given."""
    ok = [r for r in sent if r.get("status") == "SEND_OK" and r.get("msgId")]
    topics, ids = {r["topic"] for r in ok}, {r["msgId"] for r in ok}
    stray = sorted({(d["topic"], d["msgId"]) for d in read
                    if "queueOffset" in d and d["topic"] in topics and d.get("msgId") and d["msgId"] not in ids})
    keys: dict[tuple[str, str], int] = {}
    for r in ok:
        for k in r.get("keys") or []:
            keys[(r["topic"], k)] = keys.get((r["topic"], k), 0) + 1
    rnd = random.Random(seed)
    rare = [r for r in ok if r["kind"] != "normal"]
    plain = [r for r in ok if r["kind"] == "normal"]
    rnd.shuffle(plain)
    uniq_pool = [{"topic": t, "msgId": m} for t, m in stray] + rare + plain
    n_uniq = min(len(uniq_pool), max(cap // 5, cap - len(keys)))
    n_keys = cap - n_uniq
    key_list = sorted(keys)
    if len(key_list) > n_keys:
        shared = [k for k in key_list if keys[k] > 1]
        single = [k for k in key_list if keys[k] == 1]
        rnd.shuffle(single)
        key_list = sorted((shared + single)[:n_keys])
    out = [(t, k, "key") for t, k in key_list]
    seen = set()
    for r in uniq_pool[:n_uniq]:
        if (r["topic"], r["msgId"]) not in seen:
            seen.add((r["topic"], r["msgId"]))
            out.append((r["topic"], r["msgId"], "uniq"))
    return out


# The driver calls queryMessageByUniqKey by reflection and prints the exception it catches, so the client's
# NO_MESSAGE reaches it wrapped, with no message of its own ("InvocationTargetException: null"). With the
# cause unwrapped (checked by hand on 5.3.3) it is the NO_MESSAGE; such a line is taken as an empty answer
# and counted apart until Workload.java prints the cause.
WRAPPED = "InvocationTargetException: null"


def broker_answers(lines: list[dict]) -> tuple[list[list[int] | None], list[str], int]:
    """The driver's query lines as offset lists; an empty answer (the client's NO_MESSAGE) is []; any other
    error is None and listed. The third value counts the wrapped exceptions taken as empty."""
    answers, errors, wrapped = [], [], 0
    for d in lines:
        err = d.get("error") or ""
        if "phy" in d:
            answers.append(list(d["phy"]))
        elif NO_MESSAGE in err:
            answers.append([])
        elif err == WRAPPED and d.get("kind") == "uniq":
            answers.append([])
            wrapped += 1
        else:
            answers.append(None)
            errors.append(f"{d.get('topic')}#{d.get('key')}: {err}")
    return answers, errors, wrapped


# ----------------------------------------------------------------------------------------------------------
# CommitLog records, decoded here (not by rocketidx) for the client-side rule

MAGIC_V1 = -626843481
MAGIC_V2 = -626843477
BORNHOST_V6 = 1 << 4
STOREHOST_V6 = 1 << 5


@dataclass
class Record:
    offset: int
    topic: str
    store_ts: int
    sys_flag: int
    props: dict[str, str]

    @property
    def keys(self) -> str | None:
        return self.props.get("KEYS")

    @property
    def uniq(self) -> str | None:
        return self.props.get("UNIQ_KEY")


class CommitLog:
    """Random access to a broker's CommitLog segments (named by their first offset)."""

    def __init__(self, directory: Path):
        self.segments = sorted((int(p.name), p) for p in directory.iterdir() if p.name.isdigit())
        self._cache: dict[int, bytes] = {}

    def _segment(self, offset: int) -> tuple[int, bytes]:
        base, path = max(((b, p) for b, p in self.segments if b <= offset), default=(None, None))
        if base is None:
            raise ValueError(f"offset {offset} is below the CommitLog")
        if base not in self._cache:
            self._cache[base] = path.read_bytes()
        return base, self._cache[base]

    def record(self, offset: int) -> Record | None:
        base, data = self._segment(offset)
        p = offset - base
        if p + 8 > len(data):
            return None
        total, magic = struct.unpack_from(">ii", data, p)
        if magic not in (MAGIC_V1, MAGIC_V2) or total <= 0:
            return None
        rec = data[p:p + total]
        sys_flag = struct.unpack_from(">i", rec, 36)[0]
        q = 40 + 8 + (20 if sys_flag & BORNHOST_V6 else 8)
        store_ts = struct.unpack_from(">q", rec, q)[0]
        q += 8 + (20 if sys_flag & STOREHOST_V6 else 8)
        q += 4 + 8  # reconsumeTimes, preparedTransactionOffset
        body_len = struct.unpack_from(">i", rec, q)[0]
        q += 4 + max(body_len, 0)
        if magic == MAGIC_V2:
            topic_len = struct.unpack_from(">h", rec, q)[0]
            q += 2
        else:
            topic_len = rec[q]
            q += 1
        topic = rec[q:q + topic_len].decode("utf-8", "replace")
        q += topic_len
        props_len = struct.unpack_from(">h", rec, q)[0]
        q += 2
        props = {}
        for pair in rec[q:q + props_len].decode("utf-8", "replace").split("\x02"):
            if "\x01" in pair:
                k, v = pair.split("\x01", 1)
                props[k] = v
        return Record(offset, topic, store_ts, sys_flag, props)


    def records(self):
        """Every record, segment by segment, up to each one's blank end (a magic that is no record's)."""
        for base, _ in self.segments:
            _, data = self._segment(base)
            p = 0
            while p + 8 <= len(data):
                total, magic = struct.unpack_from(">ii", data, p)
                if magic not in (MAGIC_V1, MAGIC_V2) or total <= 0:
                    break
                yield magic, self.record(base + p)
                p += total


def log_census(directory: Path) -> dict[str, int]:
    """What the broker wrote: records, those in the V2 layout (a 2-byte topic length) and those carrying the
    ``__CRC32#`` property enabledAppendPropCRC appends, so that a run says which layouts it exercised."""
    out = Counter()
    for magic, rec in CommitLog(directory).records():
        out["records"] += 1
        out["v2"] += magic == MAGIC_V2
        out["prop_crc"] += "__CRC32#" in rec.props
    return dict(out)


def client_keeps(version: str, kind: str, topic: str, key: str, offsets: list[int], log: CommitLog) -> list[int]:
    """What MQAdminImpl.queryMessage keeps of a broker answer made of ``offsets`` (the broker sorts them
    ascending, duplicates kept): by key, the records of ``topic`` whose KEYS split on " " hold ``key``; by
    unique key, the records whose message id (UNIQ_KEY) is ``key``, and on 4.9 only the first with the
    earliest store time."""
    kept: list[Record] = []
    for off in sorted(offsets):
        r = log.record(off)
        if r is None:
            continue
        if kind == "key":
            if r.keys is not None and key in r.keys.split(" ") and r.topic == topic:
                kept.append(r)
        elif r.uniq == key:
            if major(version) < 5:
                if not kept:
                    kept.append(r)
                elif kept[0].store_ts > r.store_ts:
                    kept[:] = [r]
            else:
                kept.append(r)
    return [r.offset for r in kept]


# ----------------------------------------------------------------------------------------------------------
# Decoding the first difference

INDEX_HEADER_FIELDS = (("beginTimestamp", 0, 8), ("endTimestamp", 8, 8), ("beginPhyOffset", 16, 8),
                       ("endPhyOffset", 24, 8), ("hashSlotCount", 32, 4), ("indexCount", 36, 4))


def index_header(data: bytes) -> dict[str, int]:
    return {name: int.from_bytes(data[at:at + n], "big", signed=True) for name, at, n in INDEX_HEADER_FIELDS}


def index_item(data: bytes, slots: int, i: int) -> dict[str, int] | None:
    at = compare.INDEX_HEADER + 4 * slots + 20 * i
    if at + 20 > len(data):
        return None
    h, phy, td, prev = struct.unpack_from(">iqii", data, at)
    return {"item": i, "keyHash": h, "phyOffset": phy, "timeDiff": td, "prevIndex": prev}


def index_items(data: bytes, slots: int) -> list[dict]:
    items = (index_item(data, slots, i) for i in range(1, compare.index_used(data)))
    return [e for e in items if e is not None]


def describe_index(theirs: bytes | None, ours: bytes | None, slots: int) -> dict:
    """The first differing bytes of two IndexFiles, decoded, and the entries one side has and the other
    lacks (by keyHash, phyOffset, timeDiff)."""
    out: dict = {}
    if theirs is None or ours is None:
        side = "broker" if ours is None else "rocketidx"
        data = theirs if ours is None else ours
        return {"only": side, "header": index_header(data)}
    out["header"] = {"broker": index_header(theirs), "rocketidx": index_header(ours)}
    if len(theirs) != len(ours):
        out["sizes"] = [len(theirs), len(ours)]
    at = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
    out["first_byte"] = at
    if at < compare.INDEX_HEADER:
        name = next(n for n, o, w in INDEX_HEADER_FIELDS if o <= at < o + w)
        out["first"] = {"where": f"header.{name}", "broker": out["header"]["broker"][name],
                        "rocketidx": out["header"]["rocketidx"][name]}
    elif at < compare.INDEX_HEADER + 4 * slots:
        s = (at - compare.INDEX_HEADER) // 4
        p = compare.INDEX_HEADER + 4 * s
        out["first"] = {"where": f"slot {s}", "broker": int.from_bytes(theirs[p:p + 4], "big"),
                        "rocketidx": int.from_bytes(ours[p:p + 4], "big")}
    else:
        i = (at - compare.INDEX_HEADER - 4 * slots) // 20
        fld = ("keyHash", "keyHash", "keyHash", "keyHash", "phyOffset", "phyOffset", "phyOffset", "phyOffset",
               "phyOffset", "phyOffset", "phyOffset", "phyOffset", "timeDiff", "timeDiff", "timeDiff", "timeDiff",
               "prevIndex", "prevIndex", "prevIndex", "prevIndex")[(at - compare.INDEX_HEADER - 4 * slots) % 20]
        out["first"] = {"where": f"item {i}.{fld}", "broker": index_item(theirs, slots, i),
                        "rocketidx": index_item(ours, slots, i)}
    a = Counter((e["keyHash"], e["phyOffset"], e["timeDiff"]) for e in index_items(theirs, slots))
    b = Counter((e["keyHash"], e["phyOffset"], e["timeDiff"]) for e in index_items(ours, slots))
    out["entries_only_broker"] = sorted((a - b).elements())[:20]
    out["entries_only_rocketidx"] = sorted((b - a).elements())[:20]
    out["entries_only_counts"] = [sum((a - b).values()), sum((b - a).values())]
    return out


def cq_entry(data: bytes, i: int) -> dict | None:
    if 20 * i + 20 > len(data):
        return None
    phy, size, tags = struct.unpack_from(">qiq", data, 20 * i)
    return {"entry": i, "phyOffset": phy, "size": size, "tagsCode": tags}


def describe_queue(theirs: bytes | None, ours: bytes | None) -> dict:
    if theirs is None or ours is None:
        data = theirs if ours is None else ours
        used = next((i for i in range(len(data) // 20) if data[20 * i:20 * i + 20] == bytes(20)), len(data) // 20)
        return {"only": "broker" if ours is None else "rocketidx", "size": len(data), "entries": used,
                "first": cq_entry(data, 0)}
    at = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
    i = at // 20
    out = {"first_byte": at, "entry": i, "broker": cq_entry(theirs, i), "rocketidx": cq_entry(ours, i)}
    if len(theirs) != len(ours):
        out["sizes"] = [len(theirs), len(ours)]
    n = min(len(theirs), len(ours)) // 20
    out["entries_differing"] = sum(theirs[20 * k:20 * k + 20] != ours[20 * k:20 * k + 20] for k in range(n))
    return out


# ----------------------------------------------------------------------------------------------------------
# One version

@dataclass
class Result:
    version: str
    root: str = ""
    ok: bool = False
    error: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    sent: int = 0
    sent_failed: int = 0
    read: int = 0
    read_errors: int = 0
    read_error_topics: list[str] = field(default_factory=list)
    sent_not_read: int = 0
    broker_version_flag: bool = False
    build_rc: int | None = None
    build_stderr: str = ""
    consumequeue: list[int] = field(default_factory=lambda: [0, 0])
    consumequeue_differ: dict[str, dict] = field(default_factory=dict)
    consumequeue_unloaded: list[str] = field(default_factory=list)  # broker files its own load never opens
    batch_consumequeue: list[int] = field(default_factory=lambda: [0, 0])  # with --batchcq: files identical
    batch_lookups: list[int] = field(default_factory=lambda: [0, 0])  # message offsets a pull read: same unit
    light_queues: int = 0  # %LMQ% queues the broker wrote (enableMultiDispatch)
    index: list[int] = field(default_factory=lambda: [0, 0])
    index_empty_tail: int = 0
    index_differ: dict[str, dict] = field(default_factory=dict)
    queries: list[int] = field(default_factory=lambda: [0, 0])
    queries_late: int = 0
    queries_wrapped_empty: int = 0
    query_stats: dict[str, int] = field(default_factory=dict)
    query_errors: list[str] = field(default_factory=list)
    query_differ: list[dict] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)
    log: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        if self.error and not self.consumequeue[1]:
            return f"{self.version}: FAILED: {self.error}"
        s = (f"{self.version}: consumequeue {self.consumequeue[0]}/{self.consumequeue[1]} identical, "
             f"index {self.index[0]}/{self.index[1]} identical ({self.index_empty_tail} empty trailing broker "
             f"file(s) left out), queries {self.queries[0]}/{self.queries[1]} identical, messages sent "
             f"{self.sent}, read by consumer {self.read}; log records {self.log.get('records', 0)}, "
             f"V2 {self.log.get('v2', 0)}, with __CRC32# {self.log.get('prop_crc', 0)}")
        if self.light_queues:
            s += f"; light queues {self.light_queues}"
        if self.batch_consumequeue[1]:
            s += (f"; batchconsumequeue {self.batch_consumequeue[0]}/{self.batch_consumequeue[1]} identical, lookups "
                  f"by message offset {self.batch_lookups[0]}/{self.batch_lookups[1]} as the broker served them")
        if self.consumequeue_unloaded:
            s += (f"; {len(self.consumequeue_unloaded)} broker queue file(s) its own load never opens left out "
                  f"({', '.join(self.consumequeue_unloaded[:2])})")
        if self.settings:
            s += " (" + ", ".join(f"{k}={v}" for k, v in self.settings.items()) + ")"
        return s + (f" [error: {self.error}]" if self.error else "")


def _timed(res: Result, phase: str, t0: float) -> float:
    now = time.monotonic()
    res.seconds[phase] = round(now - t0, 1)
    return now


def broker_phase(cluster: Cluster, res: Result, messages: int, seed: int) -> tuple[list, list, int]:
    """Send, read, query the running broker; returns (queries, broker answers, query start ms)."""
    root = cluster.root
    t = time.monotonic()
    run_driver(cluster, "send", f"127.0.0.1:{cluster.port}", str(root / "sent.jsonl"), str(messages), str(seed),
               *send_flags(cluster.version, cluster.conf), log="send")
    t = _timed(res, "send", t)
    sent = read_jsonl(root / "sent.jsonl")
    res.sent = sum(r["status"] == "SEND_OK" for r in sent)
    res.sent_failed = len(sent) - res.sent

    run_driver(cluster, "read", str(root / "read.jsonl"), log="read")
    t = _timed(res, "read", t)
    read = read_jsonl(root / "read.jsonl")
    got = [d for d in read if "queueOffset" in d]
    res.read = len(got)
    res.read_errors = sum("error" in d for d in read)
    # 5.x lists rmq_sys_SYNC_BROKER_MEMBER_<broker>, a topic with no queue: one error line there is expected.
    res.read_error_topics = sorted({d.get("topic") for d in read if "error" in d})
    # By id, or by body where the id differs (a 5.x batch's messages are stored under the batch's id). A
    # transaction's sent id is its half's; what reaches the topic is the commit, with the same id; a
    # rollback (or a half the check discarded) never reaches it.
    seen = {(d["topic"], d["msgId"]) for d in got} | {(d["topic"], d["sha1"]) for d in got}
    res.sent_not_read = sum((r["topic"], r["msgId"]) not in seen and (r["topic"], r["sha1"]) not in seen
                            for r in sent
                            if r["status"] == "SEND_OK" and r["kind"] not in ("tx-rollback", "tx-unknown"))

    queries = pick_queries(sent, seed=seed, read=got)
    (root / "queries.tsv").write_text("".join(f"{t_}\t{k}\t{kind}\n" for t_, k, kind in queries), encoding="utf-8")
    started_ms = int(time.time() * 1000)
    run_driver(cluster, "query", str(root / "queries.tsv"), str(root / "broker-answers.jsonl"), log="query")
    t = _timed(res, "broker_query", t)
    lines = read_jsonl(root / "broker-answers.jsonl")
    if len(lines) != len(queries):
        raise HarnessError(f"Workload query answered {len(lines)} of {len(queries)} queries")
    answers, res.query_errors, res.queries_wrapped_empty = broker_answers(lines)
    return queries, answers, started_ms


def build_phase(cluster: Cluster, res: Result, out: Path, extra: list[str] | tuple[str, ...] = ()) -> bool:
    """``rocketidx build`` of the stopped broker's store (``extra``: more flags, e.g. ``--workers 2``)."""
    args = ["build", "--commitlog", str(cluster.store / "commitlog"), "--out", str(out),
            "--targets", "index,consumequeue", "--window", "0", "--broker-conf", str(cluster.broker_conf),
            *extra]
    topics = cluster.store / "config" / "topics.json"
    if cluster.conf.get("rocketidxBatchCQ") and topics.is_file():  # the workload made BatchCQ topics
        args += ["--topic-config", str(topics), "--in-process"]
    res.broker_version_flag = has_flag("build", "--broker-version")
    if res.broker_version_flag:
        args += ["--broker-version", cluster.version]
    run = rocketidx(*args)
    res.build_rc = run.returncode
    res.build_stderr = run.stderr[-2000:]
    (cluster.root / "logs" / "build.out").write_text(run.stdout + run.stderr)
    return run.returncode == 0


def batch_lookups(read: Path, built: Path) -> list[int]:
    """Every message the consumer pulled from a batch consume queue (an inner batch's messages come back one by
    one, each with its own queue offset and the batch record's CommitLog offset) against rocketidx's lookup
    of that offset in the built files: [the same record, pulled]."""
    from rocketidx.consumequeue.batch import lookup_batch
    topics = {p.name for p in built.iterdir()} if built.is_dir() else set()
    got = [d for d in read_jsonl(read) if "queueOffset" in d and d["topic"] in topics]
    same = sum((lookup_batch(built, d["topic"], d["queueId"], d["queueOffset"]) or (None,))[0] == d["phy"]
               for d in got)
    return [same, len(got)]


def compare_phase(cluster: Cluster, res: Result, out: Path) -> None:
    store, slots = cluster.store, int(cluster.conf.get("maxHashSlotNum", 5000000))
    res.log = log_census(store / "commitlog")
    cq = compare.compare_queues(store, out)
    res.consumequeue = [cq.same, cq.total]
    res.consumequeue_unloaded = cq.unloaded
    if (store / "batchconsumequeue").is_dir():
        bcq = compare.compare_queues(store, out, "batchconsumequeue")
        res.batch_consumequeue = [bcq.same, bcq.total]
        res.batch_lookups = batch_lookups(cluster.root / "read.jsonl", out / "batchconsumequeue")
        for name in bcq.differ:
            res.consumequeue_differ["batch:" + name] = {"only": "broker" if not (out / "batchconsumequeue" / name).exists()
                                                        else "rocketidx" if not (store / "batchconsumequeue" / name).exists()
                                                        else "both, bytes differ"}
    res.light_queues = sum(1 for p in (store / "consumequeue").glob("%LMQ%*/[0-9]*") if p.is_dir())
    theirs_q, ours_q = compare.queue_files(store), compare.queue_files(out)
    for name in cq.differ:
        res.consumequeue_differ[name] = describe_queue(theirs_q.get(name), ours_q.get(name))
    ix, res.index_empty_tail = compare.compare_index(store / "index", out / "index")
    res.index = [ix.same, ix.total]
    theirs_i = dict(compare.index_files(store / "index"))
    ours_i = dict(compare.index_files(out / "index"))
    for name in ix.differ:
        a, b = name.split("~")
        res.index_differ[name] = describe_index(theirs_i.get(a), ours_i.get(b), slots)


def query_phase(cluster: Cluster, res: Result, out: Path, queries: list, answers: list, started_ms: int) -> None:
    """Every query through one ``rocketidx query --queries`` process on the rebuilt index, the client's rule
    applied here, compared with the broker's answer."""
    qfile = cluster.root / "rocketidx-queries.jsonl"
    qfile.write_text("".join(json.dumps({"topic": t, "key": k, "maxNum": UNIQ_MAX_NUM if kind == "uniq"
                                         else KEY_MAX_NUM}, ensure_ascii=False) + "\n"
                             for t, k, kind in queries), encoding="utf-8")
    run = rocketidx("query", "--index", str(out / "index"), "--broker-conf", str(cluster.broker_conf),
                    "--queries", str(qfile))
    if run.returncode != 0:
        raise HarnessError(f"rocketidx query exited with {run.returncode}: {run.stderr.strip()[-500:]}")
    raw = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    if len(raw) != len(queries):
        raise HarnessError(f"rocketidx query answered {len(raw)} of {len(queries)} queries")
    log = CommitLog(cluster.store / "commitlog")
    same = late = 0
    stats = res.query_stats = {"empty": 0, "one": 0, "several": 0, "most": 0, "raw_offsets_dropped": 0}
    for (topic, key, kind), theirs, r in zip(queries, answers, raw):
        ours = client_keeps(cluster.version, kind, topic, key, r["offsets"], log)
        stats["empty" if not ours else "one" if len(ours) == 1 else "several"] += 1
        stats["most"] = max(stats["most"], len(ours))
        stats["raw_offsets_dropped"] += len(r["offsets"]) - len(ours)
        if theirs is not None and ours == theirs:
            same += 1
            continue
        extra = sorted((Counter(ours) - Counter(theirs or [])).elements())
        missing = sorted((Counter(theirs or []) - Counter(ours)).elements())
        # Written after the broker was asked (a transaction check's commit, a redelivery): not a difference
        # of the index, counted apart.
        if theirs is not None and not missing and extra and all(
                (rec := log.record(o)) is not None and rec.store_ts >= started_ms for o in extra):
            late += 1
            continue
        res.query_differ.append({"topic": topic, "key": key, "kind": kind, "broker": theirs, "rocketidx": ours,
                                 "rocketidx_raw": r["offsets"], "only_broker": missing, "only_rocketidx": extra})
    res.queries = [same, len(queries)]
    res.queries_late = late


def run_version(version: str, root: Path, messages: int = 600, seed: int = 1,
                settings: dict[str, str] | None = None, batchcq: bool = False,
                build_args: list[str] | tuple[str, ...] = ()) -> Result:
    """The whole matrix step for one version in ``root`` (a fresh directory); the broker and namesrv are
    down when it returns, whatever happened. ``settings``: broker.conf keys over the harness's defaults."""
    res = Result(version, root=str(root), settings=dict(settings or {}))
    root.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(version, root)
    cluster.conf.update(settings or {})
    if batchcq:
        cluster.conf["rocketidxBatchCQ"] = "true"  # read by send_flags and build_phase; unknown to the broker
    t_all = t = time.monotonic()
    try:
        cluster.start()
        t = _timed(res, "start", t)
        queries, answers, started_ms = broker_phase(cluster, res, messages, seed)
        t = time.monotonic()
        cluster.stop_broker()
        t = _timed(res, "stop_broker", t)
        cluster.stop()
        if (cluster.store / "abort").exists():
            res.error = "the broker left store/abort behind: its stop was not clean"
        out = root / "rocketidx-out"
        ok = build_phase(cluster, res, out, build_args)
        t = _timed(res, "build", t)
        if not ok:
            res.error = f"rocketidx build exited with {res.build_rc}: {res.build_stderr.strip()[-400:]}"
            return res
        compare_phase(cluster, res, out)
        t = _timed(res, "compare", t)
        query_phase(cluster, res, out, queries, answers, started_ms)
        _timed(res, "rocketidx_query", t)
        res.ok = (res.consumequeue[0] == res.consumequeue[1] and res.index[0] == res.index[1]
                  and res.batch_consumequeue[0] == res.batch_consumequeue[1]
                  and res.batch_lookups[0] == res.batch_lookups[1]
                  and res.queries[0] + res.queries_late == res.queries[1] and not res.error)
    except (HarnessError, subprocess.TimeoutExpired, OSError, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
    finally:
        cluster.stop()
        res.seconds["total"] = round(time.monotonic() - t_all, 1)
    return res


def details(res: Result, limit: int = 5) -> list[str]:
    """Human lines for the differences (the JSON summary holds them all)."""
    lines = []
    if res.read_errors or res.sent_not_read or res.sent_failed:
        lines.append(f"  consumer: {res.read_errors} error line(s) {res.read_error_topics[:3]}; {res.sent_not_read} "
                     f"sent message(s) not read; {res.sent_failed} send(s) failed")
    for name, d in list(res.consumequeue_differ.items())[:limit]:
        lines.append(f"  consumequeue {name}: {json.dumps(d)}")
    if len(res.consumequeue_differ) > limit:
        lines.append(f"  ... {len(res.consumequeue_differ) - limit} more queue file(s)")
    for name, d in list(res.index_differ.items())[:limit]:
        brief = {k: d[k] for k in ("only", "first", "sizes", "entries_only_counts") if k in d}
        lines.append(f"  index {name}: {json.dumps(brief)}")
    if len(res.index_differ) > limit:
        lines.append(f"  ... {len(res.index_differ) - limit} more IndexFile(s)")
    if res.queries_wrapped_empty:
        lines.append(f"  queries: {res.queries_wrapped_empty} broker answer(s) were '{WRAPPED}' (the driver hides "
                     f"the client's NO_MESSAGE), taken as empty")
    if res.query_stats:
        lines.append("  answers (rocketidx, after the client's rule): " + ", ".join(f"{k} {v}" for k, v in res.query_stats.items()))
    if res.queries_late:
        lines.append(f"  queries: {res.queries_late} answer(s) differ only by records stored after the broker was asked")
    for e in res.query_errors[:limit]:
        lines.append(f"  broker query error: {e}")
    for d in res.query_differ[:limit]:
        lines.append(f"  query {d['kind']} {d['topic'][:20]}#{d['key']}: broker {d['broker']} rocketidx {d['rocketidx']}")
    if len(res.query_differ) > limit:
        lines.append(f"  ... {len(res.query_differ) - limit} more differing queries")
    if res.build_rc not in (None, 0):
        lines.append(f"  build stderr: {res.build_stderr.strip()[-400:]}")
    lines.append("  seconds: " + ", ".join(f"{k} {v}" for k, v in res.seconds.items()))
    return lines


def main(argv: list[str] | None = None) -> int:
    pinned, _ = versions()
    p = argparse.ArgumentParser(prog="python -m brokers.matrix", description=__doc__.split("\n\n")[0])
    p.add_argument("--versions", nargs="+", default=pinned, help=f"default: {' '.join(pinned)}")
    p.add_argument("--messages", type=int, default=600, help="workload size (default 600)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--work", help="where each version's fresh directory is made (default: a temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the versions' directories (stores, logs, answers)")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--batchcq", action="store_true",
                   help="5.x: the workload also makes two queue.type=BatchCQ topics and sends batches to them; "
                        "rocketidx builds with --topic-config STORE/config/topics.json and batchconsumequeue/ is compared")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker.conf setting over the harness's (repeatable), e.g. enabledAppendPropCRC=true")
    p.add_argument("--build-args", default="", metavar="FLAGS",
                   help="more flags for rocketidx build, as one string (e.g. \"--in-process --workers 2\": the pool's "
                        "tasks, queue runs written in place)")
    a = p.parse_args(argv)
    settings = dict(kv.split("=", 1) for kv in a.set if "=" in kv)
    if len(settings) != len(a.set):
        p.error("--set takes KEY=VALUE")
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="rocketidx-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    results, roots = [], []
    try:
        for v in a.versions:
            roots.append(Path(tempfile.mkdtemp(prefix=f"{v}-", dir=work)))
            res = run_version(v, roots[-1], a.messages, a.seed, settings, batchcq=a.batchcq,
                              build_args=a.build_args.split())
            results.append(res)
            print(res.line(), flush=True)
            for ln in details(res):
                print(ln, flush=True)
    finally:
        if a.json:
            Path(a.json).write_text(json.dumps([r.__dict__ for r in results], indent=1, ensure_ascii=False,
                                               default=list) + "\n")
        if a.keep:
            print("kept: " + " ".join(map(str, roots)))
        else:
            # A --work given is the caller's: only the directories this run made in it go.
            for r in roots:
                shutil.rmtree(r, ignore_errors=True)
            if not a.work:
                shutil.rmtree(work, ignore_errors=True)
    return 0 if results and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
