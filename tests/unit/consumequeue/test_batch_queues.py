"""Batch consume queues (issue 34): the files of a queue.type=BatchCQ topic against a record-by-record model of
``BatchConsumeQueue.putBatchMessagePositionInfo`` (5.1.4 to 5.5.0: 46-byte units from byte 0, no blank fill,
the skip of an offset not above the last one), and that such a topic's records make no ConsumeQueue entry."""
from __future__ import annotations

import json
import os
import struct

import pytest
from hypothesis import given, strategies as st

from scenarios import Rec, java_hash, lay_segment, props, write_segments

import rocketidx.layout as L
from rocketidx.build.in_process import build_index
from rocketidx.config import BuildConfig, LightQueues, batch_topics_of
from rocketidx.errors import ConfigError, StoreLayoutError

PREPARED, COMMIT, ROLLBACK = L.SYSFLAG_TX_PREPARED, L.SYSFLAG_TX_COMMIT, L.SYSFLAG_TX_ROLLBACK
UNIT = struct.Struct(">qiqqqhii")


def tags_hash(tags: str | None) -> int:
    return 0 if not tags else java_hash(tags)


def model(records: list[Rec], offsets: list[int], file_size: int) -> dict[str, bytes]:
    """path -> bytes of every batch consume queue file the broker writes for topic B."""
    queues: dict[int, list[bytes]] = {}
    last: dict[int, int] = {}
    for rec, at in zip(records, offsets):
        if rec.topic != b"B" or rec.tx in (PREPARED, ROLLBACK):
            continue
        p = dict(kv.split("\x01", 1) for kv in rec.properties.decode().split("\x02") if "\x01" in kv)
        base, n = rec.queue_offset, 1
        if "INNER_NUM" in p and "INNER_BASE" in p:
            base, n = int(p["INNER_BASE"]), int(p["INNER_NUM"])
        phy = at if rec.phy_offset is None else rec.phy_offset
        if base < 0 or n < 0 or phy <= last.get(rec.queue_id, -1):
            continue
        last[rec.queue_id] = phy
        queues.setdefault(rec.queue_id, []).append(
            UNIT.pack(phy, len(rec.encode(at)), tags_hash(p.get("TAGS")), rec.store_timestamp_ms, base, n, -1, 0))
    out = {}
    per = file_size // 46
    for qid, units in queues.items():
        for f in range(0, len(units), per):
            data = b"".join(units[f:f + per])
            out[f"B/{qid}/{f // per * file_size:020d}"] = data + bytes(file_size - len(data))
    return out


def tree(root) -> dict[str, bytes]:
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


@st.composite
def records(draw):
    out, q = [], {0: 0, 1: 0}
    for i in range(draw(st.integers(1, 14))):
        qid = draw(st.integers(0, 1))
        pairs = [("KEYS", f"k{i}")]
        if draw(st.booleans()):
            pairs.append(("TAGS", draw(st.sampled_from(["a", "b"]))))
        n = draw(st.sampled_from([1, 1, 3, 16]))
        inner = draw(st.sampled_from(["both", "both", "num-only", "none"]))
        if inner == "both":
            pairs += [("INNER_NUM", str(n)), ("INNER_BASE", str(q[qid]))]
        elif inner == "num-only":
            pairs += [("INNER_NUM", str(n))]
        offset = draw(st.sampled_from([q[qid], q[qid], -1]))
        out.append(Rec(topic=draw(st.sampled_from([b"B", b"B", b"S"])), properties=props(*pairs), queue_id=qid,
                       queue_offset=offset, tx=draw(st.sampled_from([0, 0, PREPARED, COMMIT, ROLLBACK])),
                       phy_offset=0 if draw(st.integers(0, 9)) == 0 else None))
        q[qid] += n if inner == "both" else 1
    return out


@given(recs=records(), units_per_file=st.sampled_from([2, 3, 300]))
def test_the_files_are_the_brokers_unit_by_unit(tmp_path_factory, recs, units_per_file):
    tmp = tmp_path_factory.mktemp("b")
    seg = lay_segment(recs, size=1 << 20)
    store = write_segments(tmp, [seg])
    size = 46 * units_per_file
    config = BuildConfig(window_ms=0, timezone="UTC", targets=("consumequeue",), batch_topics=("B",),
                         batch_file_size=size, light_queues=LightQueues(True, "none"), check_crc=False)
    manifest, _ = build_index(store, tmp / "out", config, time_index=None)
    assert tree(tmp / "out" / L.BATCH_CQ_DIR) == model(recs, list(seg.offsets), size)
    assert not os.path.exists(tmp / "out" / "consumequeue" / "B")  # the broker would not load it
    assert manifest["consumequeues"]["batch"]["topics"] == ["B"]


def test_a_batch_topics_records_name_no_light_queue(tmp_path):
    lmq = props((L.PROPERTY_INNER_MULTI_DISPATCH, "%LMQ%a"), (L.PROPERTY_INNER_MULTI_QUEUE_OFFSET, "0"))
    store = write_segments(tmp_path, [lay_segment([Rec(topic=b"B", properties=lmq, queue_offset=0)])])
    config = BuildConfig(window_ms=0, targets=("consumequeue",), batch_topics=("B",),
                         light_queues=LightQueues(True, "5.2"))
    build_index(store, tmp_path / "out", config, time_index=None)
    assert not (tmp_path / "out" / "consumequeue" / "%LMQ%a").exists()
    assert (tmp_path / "out" / L.BATCH_CQ_DIR / "B" / "1" / ("0" * 20)).is_file()


def test_the_topic_table_says_which_topics(tmp_path):
    path = tmp_path / "topics.json"
    path.write_text(json.dumps({"topicConfigTable": {
        "B1": {"topicName": "B1", "attributes": {"queue.type": "BatchCQ"}},
        "S": {"topicName": "S", "attributes": {"queue.type": "SimpleCQ"}}, "N": {"topicName": "N"}}}))
    assert batch_topics_of(path) == ("B1",)
    path.write_text("{not json")
    with pytest.raises(StoreLayoutError, match="topics.json"):
        batch_topics_of(path)


def test_a_range_or_spark_build_of_batch_queues_is_refused_in_one_line(tmp_path, capsys):
    from rocketidx.cli import main
    store = write_segments(tmp_path / "store", [lay_segment([Rec(topic=b"B", queue_offset=0)])])
    (tmp_path / "topics.json").write_text(json.dumps({"topicConfigTable": {"B": {"attributes": {"queue.type": "BatchCQ"}}}}))
    base = ["build", "--commitlog", str(store / "commitlog"), "--targets", "consumequeue", "--topic-config",
            str(tmp_path / "topics.json")]
    assert main(base + ["--out", str(tmp_path / "o1"), "--from-offset", "0"]) == 2
    assert main(base + ["--out", str(tmp_path / "o2"), "--master", "local[2]"]) == 2
    err = capsys.readouterr().err
    assert err.count("rocketidx build: ConfigError") == 2 and "batch consume queues" in err
    assert main(base + ["--out", str(tmp_path / "o3")]) == 0
    with pytest.raises(ConfigError):
        BuildConfig(batch_file_size=45)


def test_a_sample_store_with_batch_records_builds_its_batch_queues(tmp_path):
    """gen --share-batch: inner batches on BatchTopic, a topic table beside commitlog/ marking it, queue offsets
    that advance by each batch's size; a regenerated store keeps its topic table as the generator's own."""
    from rocketidx.sample.generate import GenConfig, generate_store
    cfg = GenConfig(messages=3000, segment_bytes=1 << 20, share_batch=0.2, queues=2, seed=2)
    generate_store(tmp_path / "s", cfg)
    generate_store(tmp_path / "s", cfg)  # rewriting its own store: config/topics.json is not a stranger
    topics = batch_topics_of(tmp_path / "s" / "config" / "topics.json")
    assert topics == ("BatchTopic",)
    manifest, _ = build_index(tmp_path / "s", tmp_path / "out", BuildConfig(
        window_ms=0, targets=("consumequeue",), batch_topics=topics), time_index=None)
    batch = manifest["consumequeues"]["batch"]
    assert [q["queue_id"] for q in batch["queues"]] == [0, 1] and batch["units"] > 400
    for q in batch["queues"]:
        data = (tmp_path / "out" / L.BATCH_CQ_DIR / "BatchTopic" / str(q["queue_id"]) / q["files"][0]).read_bytes()
        units = [UNIT.unpack_from(data, i * 46) for i in range(q["units"])]
        assert all(b[4] + b[5] == a[4] for b, a in zip(units, units[1:]))  # base + size = the next base
        assert {u[5] for u in units} <= set(range(2, 17)) and q["max_offset"] == units[-1][4] + units[-1][5]
    assert not (tmp_path / "out" / "consumequeue" / "BatchTopic").exists()


def test_a_lookup_by_message_offset_finds_the_batch_holding_it(tmp_path):
    from rocketidx.consumequeue.batch import lookup_batch
    recs = [Rec(topic=b"B", properties=props(("INNER_NUM", "4"), ("INNER_BASE", "10")), queue_id=0, queue_offset=10),
            Rec(topic=b"B", queue_id=0, queue_offset=14),
            Rec(topic=b"B", properties=props(("INNER_NUM", "3"), ("INNER_BASE", "15")), queue_id=0, queue_offset=15)]
    seg = lay_segment(recs)
    store = write_segments(tmp_path / "s", [seg])
    build_index(store, tmp_path / "out", BuildConfig(window_ms=0, targets=("consumequeue",), batch_topics=("B",),
                                                     batch_file_size=46 * 2), time_index=None)
    d = tmp_path / "out" / L.BATCH_CQ_DIR
    found = {o: (lookup_batch(d, "B", 0, o) or (None,))[0] for o in range(8, 20)}
    a, b, c = seg.offsets
    assert found == {8: None, 9: None, 10: a, 11: a, 12: a, 13: a, 14: b, 15: c, 16: c, 17: c, 18: None, 19: None}
    assert lookup_batch(d, "B", 1, 10) is None and lookup_batch(d, "X", 0, 10) is None
