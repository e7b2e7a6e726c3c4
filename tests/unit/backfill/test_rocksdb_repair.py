"""backfill --store of a RocksDB consume queue (issue 34): a lost or damaged database rebuilt whole and swapped
in (backup, journal, roll-back), a healthy one kept, and a consumequeue/ of another layout refused."""
from __future__ import annotations

import json
import os

import pytest
from rocksstore import change, entry_value, store_with_rocksdb_queues

import rocketidx.consumequeue.rocksdb as R
from rocketidx.backfill.repair import repair_store
from rocketidx.errors import StoreLayoutError
from rocketidx.verify.store import verify_store


def _same(a: R.QueueTable, b: R.QueueTable) -> bool:
    return (set(a.entries) == set(b.entries) and all((a.entries[q] == b.entries[q]).all() for q in a.entries)
            and a.max == b.max and a.checkpoint == b.checkpoint)


def _repair(store, **kw):
    lines = []
    result = repair_store(store, targets=("consumequeue",), queue_store="rocksdb", log=lines.append, **kw)
    return result, lines


def test_a_deleted_database_is_rebuilt_as_the_dispatch_writes_it(tmp_path):
    store = store_with_rocksdb_queues(tmp_path)
    want = R.read_table(store / "consumequeue")
    os.rename(store / "consumequeue", tmp_path / "lost")
    result, lines = _repair(store)
    assert _same(R.read_table(store / "consumequeue"), want)
    assert result.queues.plan.actions["write"] and not result.queues.plan.actions["replace"]
    assert any("the store has none" in line for line in lines)
    assert not (store / "consumequeue" / "rocksdict-config.json").exists()
    assert verify_store(store, broker={"storeType": "defaultRocksDB"}).clean


def test_a_healthy_database_is_kept_and_a_rerun_changes_nothing(tmp_path):
    store = store_with_rocksdb_queues(tmp_path)
    before = sorted((p.name, p.stat().st_ino) for p in (store / "consumequeue").iterdir())
    result, lines = _repair(store)
    assert result.queues.plan.changes == 0 and result.queues.backup_dir is None
    assert sorted((p.name, p.stat().st_ino) for p in (store / "consumequeue").iterdir()) == before
    assert not (store / "consumequeue.backup").exists()


def test_a_damaged_database_is_replaced_whole_and_the_old_one_kept_in_the_backup(tmp_path):
    store = store_with_rocksdb_queues(tmp_path)
    want = R.read_table(store / "consumequeue")
    change(store / "consumequeue", "default", R.entry_key(b"A", 0, 3), None)
    change(store / "consumequeue", "default", R.entry_key(b"A", 1, 99), entry_value(1, 2, 3, 4))
    damaged = R.read_table(store / "consumequeue")
    result, lines = _repair(store)
    assert result.queues.plan.differences == {"missing-entry": 1, "extra-entry": 1}
    assert _same(R.read_table(store / "consumequeue"), want)
    backup = result.queues.backup_dir
    journal = json.loads((tmp_path / backup / "journal.json").read_text())
    assert journal["finished"] and journal["rocksdb"] and journal["area"] == "consumequeue"
    assert _same(R.read_table(os.path.join(backup, "consumequeue")), damaged)


def test_a_swap_killed_midway_is_rolled_back_by_the_next_run(tmp_path, monkeypatch):
    import rocketidx.backfill.swap as swap
    store = store_with_rocksdb_queues(tmp_path)
    change(store / "consumequeue", "default", R.entry_key(b"B", 0, 0), None)
    damaged = R.read_table(store / "consumequeue")
    real, calls = os.rename, []

    def dying_rename(a, b):
        calls.append(a)
        if len(calls) == 4:
            raise KeyboardInterrupt("killed")
        return real(a, b)

    monkeypatch.setattr(swap.os, "rename", dying_rename)
    with pytest.raises(KeyboardInterrupt):
        _repair(store)
    monkeypatch.setattr(swap.os, "rename", real)
    result, lines = _repair(store, dry_run=True)
    assert any("would be rolled back" in line for line in lines)
    result, lines = _repair(store)
    assert result.rolled_back
    assert verify_store(store, broker={"storeType": "defaultRocksDB"}).clean
    backups = sorted((store / "consumequeue.backup").iterdir())
    assert _same(R.read_table(backups[-1] / "consumequeue"), damaged)


def test_queue_directories_where_the_database_belongs_are_refused(tmp_path):
    store = store_with_rocksdb_queues(tmp_path)
    os.rename(store / "consumequeue", tmp_path / "db")
    (store / "consumequeue" / "TopicA" / "0").mkdir(parents=True)
    with pytest.raises(StoreLayoutError, match="directories"):
        _repair(store)


def test_the_broker_confs_store_type_makes_the_repair_a_rocksdb_one(tmp_path):
    from rocketidx.config import backfill_request
    store = store_with_rocksdb_queues(tmp_path)
    r = backfill_request(store, broker_conf=tmp_path / "broker.conf")
    assert r.queue_store == "rocksdb" and r.rocksdb_compression == ("lz4", "zstd")
    (tmp_path / "sep.conf").write_text("storeType=defaultRocksDB\nuseSeparateStorePathForRocksdbCQ=true\n")
    from rocketidx.errors import ConfigError
    with pytest.raises(ConfigError, match="useSeparateStorePathForRocksdbCQ"):
        backfill_request(store, broker_conf=tmp_path / "sep.conf")


def test_a_deleted_database_with_light_queues_is_rebuilt_with_them(tmp_path):
    from rocketidx.config import LightQueues
    store = store_with_rocksdb_queues(tmp_path, lmq="rocksdb")
    want = R.read_table(store / "consumequeue")
    os.rename(store / "consumequeue", tmp_path / "lost")
    _repair(store, rocksdb_light_queues=LightQueues(True, "rocksdb"))
    assert _same(R.read_table(store / "consumequeue"), want)
