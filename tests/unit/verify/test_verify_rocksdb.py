"""verify --store on a RocksDB consume queue (issue 34): clean on a dispatch's own database, each damage kind
reported with what the restart does about it, and nothing in the store written."""
from __future__ import annotations

import hashlib
import os
import struct

import pytest
from rocksstore import change, entry_value, store_with_rocksdb_queues

import rocketidx.consumequeue.rocksdb as R
from rocketidx.verify.store import verify_store


def _listing(d):
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha1(p.read_bytes()).hexdigest())
                  for p in d.iterdir())


@pytest.fixture
def store(tmp_path):
    return store_with_rocksdb_queues(tmp_path)


def _verify(store, tmp_path):
    return verify_store(store, broker={"storeType": "defaultRocksDB"}, broker_source=str(tmp_path / "broker.conf"))


def test_a_dispatchs_own_database_is_clean_and_left_as_it_was(store, tmp_path):
    before = _listing(store / "consumequeue")
    report = _verify(store, tmp_path)
    assert report.clean, report.as_dict()
    cq = report.areas["consumequeue"]
    assert cq.entries_checked == 59  # 60 records, one a prepared half
    assert report.state["consumequeue_store"] == "rocksdb"
    assert _listing(store / "consumequeue") == before


def test_the_expected_database_has_each_records_fields_and_the_checkpoint(store):
    t = R.read_table(store / "consumequeue")
    assert sorted(t.entries) == [("A", 0), ("A", 1), ("B", 0)]
    assert [len(t.entries[q]) for q in sorted(t.entries)] == [20, 19, 20]
    a1 = t.entries[("A", 1)]
    assert list(a1["queue_offset"]) == list(range(19))
    assert (a1["store_ts"] > 0).all() and (t.entries[("A", 0)]["size"] > 0).all()
    last = max((a["phy_offset"][-1] + a["size"][-1], q) for q, a in t.entries.items())
    assert t.checkpoint == last[0]
    assert t.max[("B", 0)] == (int(t.entries[("B", 0)]["phy_offset"][-1]), 19)


def _db_key(topic, qid, off):
    return R.entry_key(topic.encode(), qid, off)


def test_each_damage_kind_is_reported_with_the_restarts_effect(store, tmp_path):
    db = store / "consumequeue"
    t = R.read_table(db)
    b0 = t.entries[("B", 0)]
    change(db, "default", _db_key("B", 0, 3), None)  # an entry deleted
    e = t.entries[("A", 0)][5]
    change(db, "default", _db_key("A", 0, 5), entry_value(int(e["phy_offset"]), int(e["size"]) + 1,
                                                          int(e["tags_code"]), int(e["store_ts"])))  # changed
    change(db, "offset", R.offset_key(b"A", 1, "max"), struct.pack(">qq", int(t.entries[("A", 1)]["phy_offset"][7]), 7))
    report = _verify(store, tmp_path)
    cq = report.areas["consumequeue"]
    assert dict(cq.counts) == {"missing-entry": 1, "wrong-field": 1, "max-offset": 1}
    where = {p.kind: (p.file, p.offset) for p in cq.problems}
    assert where["missing-entry"] == (f"{db}#B/0", 3)
    assert where["wrong-field"] == (f"{db}#A/0", 5)
    assert where["max-offset"] == (f"{db}#A/1", 18)
    assert set(report.restart["consumequeue"]) == {"missing-entry", "wrong-field", "max-offset"}
    assert "stays missing" in report.restart["consumequeue"]["missing-entry"]
    assert report.state["restart_model"]["consumequeue"]["lost_entries"] == 2
    assert int(b0["phy_offset"][3]) < t.checkpoint


def test_a_missing_max_key_an_extra_entry_and_a_min_past_the_first_entry(store, tmp_path):
    db = store / "consumequeue"
    t = R.read_table(db)
    change(db, "offset", R.offset_key(b"B", 0, "max"), None)
    change(db, "default", _db_key("A", 1, 40), entry_value(1, 2, 3, 4))
    change(db, "offset", R.offset_key(b"A", 0, "min"), struct.pack(">qq", int(t.entries[("A", 0)]["phy_offset"][4]), 4))
    change(db, "offset", R.offset_key(b"A", 1, "min"), struct.pack(">qq", 0, 0))  # a broker's own: fine
    cq = _verify(store, tmp_path).areas["consumequeue"]
    assert dict(cq.counts) == {"max-offset": 1, "extra-entry": 1, "min-offset": 1}
    assert [p.detail for p in cq.problems if p.kind == "max-offset"][0].startswith("max key missing")


def test_entries_past_the_checkpoint_are_restored_by_the_restart(store, tmp_path):
    db = store / "consumequeue"
    t = R.read_table(db)
    # A clean restart dispatches the records past the checkpoint, strictly (the restart model's D).
    change(db, "default", _db_key("B", 0, 19), None)
    change(db, "offset", R.CHECKPOINT_KEY, struct.pack(">q", int(t.entries[("B", 0)][-2]["phy_offset"])))
    report = _verify(store, tmp_path)
    assert report.clean, report.as_dict()["areas"]["consumequeue"]
    assert report.state["restart_model"]["consumequeue"] == {"restored_entries": 1, "lost_entries": 0}


def test_a_directory_that_is_no_database_is_named(tmp_path):
    from rocketidx.errors import StoreLayoutError
    d = tmp_path / "db"
    d.mkdir()
    (d / "CURRENT").write_text("MANIFEST-000001\n")
    (d / "MANIFEST-000001").write_bytes(b"junk")
    with pytest.raises(StoreLayoutError, match=str(d)):
        R.read_table(d)
    assert sorted(os.listdir(d)) == ["CURRENT", "MANIFEST-000001"]


def test_a_deleted_database_is_restored_by_the_restart_but_for_the_logs_first_record(store, tmp_path):
    """With no database the broker's D is 0 and it dispatches the records past it, strictly: the record at
    offset 0 never comes back (a 5.5.0 broker restarted on a deleted database lost it: brokers.redispatch)."""
    import shutil
    shutil.rmtree(store / "consumequeue")
    report = _verify(store, tmp_path)
    cq = report.areas["consumequeue"]
    assert dict(cq.counts) == {"missing-entry": 1}
    assert [(p.file.rsplit("#", 1)[1], p.offset) for p in cq.problems] == [("B/0", 0)]
    assert report.state["restart_model"]["consumequeue"] == {"restored_entries": 58, "lost_entries": 1}


def test_query_consumequeue_reads_a_rocksdb_store_as_the_broker_serves_it(store):
    from rocketidx.ops.query import query_queue
    t = R.read_table(store / "consumequeue")
    e = t.entries[("A", 1)][4]
    assert query_queue(str(store), "A", 1, 4) == (int(e["phy_offset"]), int(e["size"]), int(e["tags_code"]))
    assert query_queue(str(store), "A", 1, 19) is None  # past the max
    assert query_queue(str(store), "Z", 0, 0) is None
    change(store / "consumequeue", "offset", R.offset_key(b"A", 1, "max"), struct.pack(">qq", 0, 3))
    assert query_queue(str(store), "A", 1, 4) is None  # the broker serves up to its max key


@pytest.mark.parametrize("version, rule, units", [("5.5.0", "rocksdb", 11), ("5.3.3", "5.2", 12)])
def test_light_queues_in_a_rocksdb_store_follow_its_own_rule(tmp_path, version, rule, units):
    """enableLmq alone puts a message's INNER_MULTI_DISPATCH names into the database (dispatchLMQ, 5.3.2 on); a
    %DLQ% record's names too before 5.5.0. Without enableLmq in the broker conf they stay unexplained, and so
    they do before 5.3.2, whose database holds no light queue."""
    store = store_with_rocksdb_queues(tmp_path, lmq=rule)
    t = R.read_table(store / "consumequeue")
    assert sorted(q for q in t.entries if q[0].startswith("%LMQ%")) == [("%LMQ%x", 0), ("%LMQ%y0", 0),
                                                                        ("%LMQ%y1", 0)]
    assert len(t.entries[("%LMQ%x", 0)]) == units  # every fifth record; the %DLQ% one (i == 25) per the rule
    conf = {"storeType": "defaultRocksDB", "enableLmq": True}
    report = verify_store(store, broker=conf, broker_version=version)
    assert report.clean, report.as_dict()["areas"]["consumequeue"]
    # Read by the other release's rule, the %DLQ% record's unit is one the database lacks or should not hold.
    other = verify_store(store, broker=conf, broker_version="5.3.3" if version == "5.5.0" else "5.5.0")
    assert dict(other.areas["consumequeue"].counts) == ({"missing-entry": 1} if version == "5.5.0"
                                                       else {"extra-entry": 1})
    for bare in (verify_store(store, broker={"storeType": "defaultRocksDB"}, broker_version=version),
                 verify_store(store, broker=conf, broker_version="5.3.1")):
        assert dict(bare.areas["consumequeue"].counts) == {"unexplained-queue": 11 + units}


def test_a_relative_path_reads_the_same_database(store, monkeypatch):
    monkeypatch.chdir(store)
    assert R.read_table("consumequeue").entry_count == 59


def test_a_key_of_another_shape_is_named_and_the_rest_checked(store, tmp_path):
    change(store / "consumequeue", "default", b"\x00\x00\x00\x05junk", b"\x01" * 28)
    change(store / "consumequeue", "offset", R.offset_key(b"A", 0, "max") + b"x", b"\x00" * 16)
    cq = _verify(store, tmp_path).areas["consumequeue"]
    assert dict(cq.counts) == {"malformed-key": 2} and cq.entries_checked == 59
    assert sorted(p.file.rsplit("#", 1)[1] for p in cq.problems) == ["default", "offset"]
