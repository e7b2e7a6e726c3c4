"""What a broker serves, measured against what its CommitLog holds (rocketidx's read of the log): the
messages a consumer pulling every queue from its min to its max offset gets, and the keys the admin
API's queryMessage finds."""
from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa

from brokers.harness import Cluster, HarnessError, run_driver
from rocketidx.commitlog.columns import MESSAGE_SCHEMA
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
import rocketidx.layout as L

TX_MASK, TX_PREPARED, TX_ROLLBACK = L.SYSFLAG_TX_MASK, 0x4, L.SYSFLAG_TX_ROLLBACK
SYSTEM_PREFIXES = ("RMQ_SYS_", "rmq_sys_", "SCHEDULE_TOPIC_XXXX")


def log_messages(store: Path) -> list[dict]:
    """Every valid record of the store's CommitLog, as rocketidx reads it."""
    reader = CommitLogReader(list_segments(store / "commitlog"))
    table = pa.Table.from_batches(list(reader), MESSAGE_SCHEMA)
    return table.select(["phy_offset", "topic", "queue_id", "sys_flag", "keys", "uniq_key", "tags"]).to_pylist()


def queued(messages: list[dict]) -> list[dict]:
    """The records the dispatch puts into a ConsumeQueue: all but transaction halves and rollbacks as
    written by the producer (the broker stores a half again, as a plain record, in RMQ_SYS_TRANS_HALF_TOPIC)."""
    return [m for m in messages if m["sys_flag"] & TX_MASK not in (TX_PREPARED, TX_ROLLBACK)]


def key_sample(messages: list[dict], n: int, seed: int = 0) -> list[tuple[str, str, int]]:
    """Up to ``n`` (topic, KEYS word, CommitLog offset) of queued messages, for the admin key query."""
    pairs = [(m["topic"], k, m["phy_offset"]) for m in queued(messages)
             for k in dict.fromkeys((m["keys"] or "").split(L.KEY_SEPARATOR)) if k]
    random.Random(seed).shuffle(pairs)
    return pairs[:n]


@dataclass
class Served:
    messages: int  # queued messages the log holds
    got: int  # of those, how many a consumer got
    keys: int  # keys asked
    found: int  # keys whose message the admin query returned
    lost_examples: list
    unrouted: dict = None  # queued messages of topics the namesrv routes no consumer to ({topic: n}), left out

    def as_dict(self) -> dict:
        return asdict(self)


def consumer_offsets(path: Path) -> set[int]:
    return consumer_read(path)[0]


def consumer_read(path: Path) -> tuple[set[int], set[str]]:
    """The CommitLog offsets a consumer got, and the topics it could pull at all (min/max answered)."""
    got, routed = set(), set()
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if "phy" in rec:
            got.add(rec["phy"])
        elif "min" in rec:
            routed.add(rec["topic"])
    return got, routed


def broker_key_answers(cluster: Cluster, queries: list[tuple[str, str, str]], name: str) -> list[dict]:
    """The admin API's queryMessage (maxNum 64, all time) for each (topic, key, kind) query."""
    qin, qout = cluster.root / f"{name}.tsv", cluster.root / f"{name}.jsonl"
    qin.write_text("".join(f"{t}\t{k}\t{kind}\n" for t, k, kind in queries), encoding="utf-8")
    run_driver(cluster, "query", str(qin), str(qout), log=name)
    return [json.loads(line) for line in qout.read_text(encoding="utf-8").splitlines()]


def measure(cluster: Cluster, messages: list[dict], sample: list[tuple[str, str, int]], name: str) -> Served:
    """Consumer pull of every queue plus the key queries, against a running broker."""
    read = cluster.root / f"{name}-read.jsonl"
    run_driver(cluster, "read", str(read), log=name)
    got, routed = consumer_read(read)
    # 4.9's namesrv routes no consumer to RMQ_SYS_TRANS_OP_HALF_TOPIC: a system topic without a route is
    # said, not counted; any other topic without one counts its messages as lost
    unrouted: dict[str, int] = {}
    want = []
    for m in queued(messages):
        if m["topic"] not in routed and m["topic"].startswith(SYSTEM_PREFIXES):
            unrouted[m["topic"]] = unrouted.get(m["topic"], 0) + 1
        else:
            want.append(m)
    if want and not got:  # no topic routed (the driver waited a minute for them): not a measure of loss
        raise HarnessError(f"the consumer read nothing from RocketMQ {cluster.version}; see {read}")
    lost = [m for m in want if m["phy_offset"] not in got]
    answers = broker_key_answers(cluster, [(t, k, "key") for t, k, _ in sample], f"{name}-keys")
    found = sum(1 for (_, _, phy), a in zip(sample, answers) if phy in a.get("phy", []))
    return Served(len(want), len(want) - len(lost), len(sample), found,
                  [(m["topic"], m["queue_id"], m["phy_offset"]) for m in lost[:5]], unrouted)
