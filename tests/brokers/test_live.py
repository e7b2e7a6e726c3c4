"""The pinned CI version of RocketMQ (versions.txt, marked ci), run for real: its own files are the reference
for rocketidx's, its admin API's answers for rocketidx's queries, and after a kill -9, rocketidx's repair
must leave a broker that serves every message and every key. ``make brokers`` runs every version, and these
tests' light-queue, batch-queue and RocksDB runs (marked ``campaign``: two minutes each, which make test's 30
minutes cannot hold; brokers.light, matrix --batchcq and brokers.rocksdb run them on more releases there)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from brokers.compare import compare_index, compare_queues
from brokers.crash import crash_run, rocketidx
from brokers.harness import Cluster, MavenUnavailable, driver_classes, major, run_driver, versions
from brokers.served import broker_key_answers, log_messages

pytestmark = pytest.mark.broker

VERSION = versions()[1]
MESSAGES = 400
TAG_QUERIES = [int(x) for x in VERSION.split(".")[:2]] >= [5, 4]  # the admin API's key type T, from 5.4.0


@pytest.fixture(scope="module")
def jars():
    try:
        driver_classes(VERSION)
    except MavenUnavailable as e:
        pytest.skip(f"RocketMQ {VERSION} cannot be fetched: {e}")


@pytest.fixture(scope="module")
def written(jars, tmp_path_factory):
    """A broker's store after the workload and a clean stop, with its admin API's answers to key queries
    asked before the stop."""
    root = tmp_path_factory.mktemp(f"rocketmq-{VERSION}")
    cluster = Cluster(VERSION, root)
    cluster.start()
    try:
        flags = ["timer", "longgroup"] if major(VERSION) >= 5 else []
        run_driver(cluster, "send", f"127.0.0.1:{cluster.port}", str(root / "sent.jsonl"), str(MESSAGES), "7", *flags)
        sent = [json.loads(line) for line in (root / "sent.jsonl").read_text(encoding="utf-8").splitlines()]
        queries = sorted({(s["topic"], k, "key") for s in sent if s["status"] == "SEND_OK" for k in s["keys"]})
        if TAG_QUERIES:
            queries += sorted({(s["topic"], s["tags"], "tag") for s in sent if s["status"] == "SEND_OK" and s["tags"]})
        answers = broker_key_answers(cluster, queries, "queries")
    finally:
        cluster.stop()
    return cluster, sent, queries, answers


def build(cluster: Cluster, out, *extra: str) -> subprocess.CompletedProcess:
    return rocketidx("build", "--commitlog", str(cluster.store / "commitlog"), "--out", str(out), "--targets",
                     "index,consumequeue", "--window", "0", "--broker-conf", str(cluster.broker_conf), *extra)


def test_the_workload_reached_the_broker(written):
    cluster, sent, _, _ = written
    ok = [s for s in sent if s["status"] == "SEND_OK"]
    assert len(ok) == len(sent) > MESSAGES
    assert {s["kind"] for s in ok} >= {"normal", "batch", "delay", "tx-commit", "tx-rollback", "tx-unknown", "retry"}
    assert len(list((cluster.store / "commitlog").iterdir())) >= 2
    assert len(list((cluster.store / "index").iterdir())) >= 2


def test_rebuilt_queues_and_index_are_the_brokers_own_bytes(written, tmp_path):
    cluster, *_ = written
    run = build(cluster, tmp_path / "out", "--broker-version", VERSION)
    queues = compare_queues(cluster.store, tmp_path / "out")
    index, empty_tail = compare_index(cluster.store / "index", tmp_path / "out" / "index")
    assert queues.total > 20 and queues.same == queues.total, queues.differ[:5]
    assert index.total >= 2 and index.same == index.total, index.differ[:5]
    assert f"index rules: RocketMQ {VERSION}" in run.stdout


def test_without_the_version_the_rules_used_are_said(written, tmp_path):
    """No --broker-version: 8fc57f1's rules, and the summary says so in one line; on a 5.4+ broker's
    store those are not its rules, so its IndexFiles then differ."""
    cluster, *_ = written
    run = build(cluster, tmp_path / "out")
    assert "no --broker-version" in run.stdout
    index, _ = compare_index(cluster.store / "index", tmp_path / "out" / "index")
    tags = VERSION.split(".")[:2] >= ["5", "4"]
    assert (index.same == index.total) != tags


def test_query_exact_answers_what_the_admin_query_answers(written, tmp_path):
    """Every (topic, key) sent, and from 5.4 every (topic, tag): rocketidx's --exact answer is the admin
    API's queryMessage answer (maxNum 64, all time), offset for offset."""
    cluster, _, queries, answers = written
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps({"topic": t, kind: k}) + "\n" for t, k, kind in queries), encoding="utf-8")
    run = rocketidx("query", "--store", str(cluster.store), "--queries", str(qfile), "--exact", "--broker-conf",
                    str(cluster.broker_conf), "--broker-version", VERSION)
    ours = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(ours) == len(answers) == len(queries) >= 300
    assert not TAG_QUERIES or sum(kind == "tag" for *_, kind in queries) >= 20
    differ = [(q, a.get("phy", a.get("error")), o["offsets"]) for q, a, o in zip(queries, answers, ours)
              if sorted(a.get("phy", [])) != sorted(o["offsets"])]
    assert differ == []


def test_after_a_crash_the_repaired_store_serves_every_message_and_key(jars, tmp_path):
    row = crash_run(VERSION, tmp_path, seed=11, messages=3000, sample=1000)
    after = row["after_backfill"]
    assert row["log_messages"] > 100
    assert after["got"] == after["messages"] == row["log_messages"], after["lost_examples"]
    assert after["found"] == after["keys"], after
    wrong = [c for c in row["checks"] if not c["ok"]]
    assert wrong == [], wrong


@pytest.mark.campaign
def test_light_queues_are_the_brokers_and_serve_every_message_after_a_repair(jars, tmp_path):
    """enableLmq and enableMultiDispatch: a workload naming twelve light queues; consumequeue/ deleted after a
    clean stop, rocketidx backfill --store rebuilds it (the light queues byte for byte), and a light-queue
    consumer then reads every message it read before, and every message sent to each light queue."""
    from brokers.light import run_version
    res = run_version(VERSION, tmp_path / "light", messages=300, seed=5)
    assert res.get("error") is None, res
    assert res["light_queues"] >= 10 and res["named"] > 100, res
    assert res["light_files"][0] == res["light_files"][1] > 10, res
    assert res["missing_after"] == 0 and res["same_as_before"], res


@pytest.mark.skipif(major(VERSION) < 5, reason="queue.type=BatchCQ topics exist from 5.0")
@pytest.mark.campaign
def test_batch_consume_queues_are_the_brokers_own_bytes(jars, tmp_path):
    """Two queue.type=BatchCQ topics take batches of 1 to 16 messages and plain sends: rocketidx build
    --topic-config writes the broker's batchconsumequeue/ files byte for byte, and the rest as before."""
    from brokers.matrix import run_version
    res = run_version(VERSION, tmp_path / "batchcq", messages=300, seed=3, batchcq=True)
    assert res.error is None, res.error
    assert res.batch_consumequeue[1] >= 4 and res.batch_consumequeue[0] == res.batch_consumequeue[1], \
        res.consumequeue_differ
    assert res.consumequeue[0] == res.consumequeue[1] and res.index[0] == res.index[1], res.consumequeue_differ
    assert res.batch_lookups[1] > 100 and res.batch_lookups[0] == res.batch_lookups[1], res.batch_lookups


@pytest.mark.skipif(major(VERSION) < 5, reason="storeType=defaultRocksDB exists from 5.2.0")
@pytest.mark.campaign
def test_a_rocksdb_consume_queue_is_checked_damaged_lost_repaired_and_served(jars, tmp_path):
    """storeType=defaultRocksDB: verify --store is clean on the broker's own database and reports an entry
    deleted, an entry changed and a wrong max key; after the database is deleted, backfill --store rebuilds it
    equal to the broker's (entries, max keys, checkpoint), the broker starts on it and the consumer reads every
    message it read before, at the same queue offsets."""
    from brokers.rocksdb import run_version
    res = run_version(VERSION, tmp_path / "rocksdb", messages=300, seed=9)
    assert res.get("error") is None, res
    assert res["own_store"]["clean"] and res["own_store"]["entries_checked"] > 300, res["own_store"]
    assert all(d["found"] for d in res["damage"].values()), res["damage"]
    r = res["rebuilt"]
    assert r["queues_identical"][0] == r["queues_identical"][1] > 10 and r["max_equal"], r
    assert r["checkpoint"][0] == r["checkpoint"][1], r
    assert res["read"]["missing_after"] == 0 and res["read"]["before"] > 300, res["read"]
    assert res["after_restart"]["clean"], res["after_restart"]
