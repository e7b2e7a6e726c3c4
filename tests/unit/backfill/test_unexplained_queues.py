"""Issue 31 items 4 and 5 (must-show 5): what a broker's store holds that rocketidx does not rebuild is left
alone by the plain repair, files and inodes, while the index is repaired; verify --store lists it apart."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from refdata import GOLDEN_CASES
from store_scenarios import store_of

from rocketidx.cli import main

CASE = next(c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists())


def _inodes(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_ino, p.read_bytes()) for p in sorted(root.rglob("*"))
            if p.is_file()}


def _store(tmp_path: Path) -> tuple[Path, list[str], str]:
    """The reference store with its newest IndexFile lost (the damage every case repairs)."""
    store, sizes = store_of(CASE, tmp_path / "store")
    newest = sorted((store / "index").iterdir())[-1]
    lost = newest.name
    newest.unlink()
    flags = ["--hash-slots", str(sizes["hash_slot_num"]), "--index-num", str(sizes["index_num"])]
    return store, flags, lost


def _repair(store: Path, flags: list[str], capsys) -> str:
    assert main(["backfill", "--store", str(store), "--in-process"] + flags) == 0
    return capsys.readouterr().out


def _index_repaired(store: Path, flags: list[str], lost: str, capsys) -> None:
    """Every entry of the log indexed again (verify covers the whole log: a lost file shows as uncovered)."""
    assert main(["verify", "--index", str(store / "index"), "--commitlog", str(store)] + flags) == 0, \
        capsys.readouterr().out
    capsys.readouterr()


def test_a_light_queue_and_a_topic_the_log_no_longer_holds_keep_their_files(tmp_path, capsys):
    store, flags, lost = _store(tmp_path)
    src = sorted((store / "consumequeue" / "TopicOrders").iterdir())[0]
    lmq = store / "consumequeue" / "%LMQ%mqtt-a" / "0"  # entries pointing at real records of the log
    shutil.copytree(src, lmq)
    gone = store / "consumequeue" / "TopicRetired" / "3"
    shutil.copytree(src, gone)
    before = _inodes(lmq.parent) | {"retired/" + k: v for k, v in _inodes(gone.parent).items()}

    assert main(["verify", "--store", str(store), "--json"] + flags) == 1  # the lost IndexFile only
    report = json.loads(capsys.readouterr().out)
    unexplained = report["state"]["unexplained_queues"]
    assert set(unexplained) == {"%LMQ%mqtt-a/0", "TopicRetired/3"}
    assert "light queue" in unexplained["%LMQ%mqtt-a/0"]
    assert "no record of this topic" in unexplained["TopicRetired/3"]
    assert "unexplained-queue" not in report["areas"]["consumequeue"]["counts"]
    assert report["areas"]["consumequeue"]["clean"]

    out = _repair(store, flags, capsys)
    assert "left     consumequeue/%LMQ%mqtt-a/0: a light queue" in out
    assert "left     consumequeue/TopicRetired/3: no record of this topic" in out
    assert _inodes(lmq.parent) | {"retired/" + k: v for k, v in _inodes(gone.parent).items()} == before
    _index_repaired(store, flags, lost, capsys)
    assert main(["verify", "--store", str(store)] + flags) == 0
    assert "listed apart" in capsys.readouterr().out


def test_a_batch_cq_topic_gets_no_consumequeue_and_its_batch_queues_are_repaired(tmp_path, capsys):
    """Issue 34: a BatchCQ topic never gets a consumequeue/ directory (the broker would not load it); its
    batchconsumequeue/ is checked and repaired like the queues (the made-up file goes to the backup)."""
    store, flags, lost = _store(tmp_path)
    shutil.rmtree(store / "consumequeue" / "TopicPay")  # a BatchCQ broker keeps it in batchconsumequeue/
    batch = store / "batchconsumequeue" / "TopicPay" / "0" / f"{0:020d}"
    batch.parent.mkdir(parents=True)
    batch.write_bytes(b"\x01" * 46 * 10)
    (store / "config").mkdir()
    (store / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": {
        "TopicPay": {"topicName": "TopicPay", "readQueueNums": 4, "writeQueueNums": 4,
                     "attributes": {"queue.type": "BatchCQ"}},
        "TopicOrders": {"topicName": "TopicOrders", "attributes": {}}}}))
    made_up = batch.read_bytes()

    assert main(["verify", "--store", str(store), "--json"] + flags) == 1
    report = json.loads(capsys.readouterr().out)
    assert "consumequeue/TopicPay" not in report["state"]["skipped"]  # issue 34: verify checks its batch queues
    assert report["areas"]["consumequeue"]["clean"]  # no missing-queue for it
    assert report["areas"]["batchconsumequeue"]["counts"]  # the made-up file is not the rebuild's

    out = _repair(store, flags, capsys)
    assert "skipped  consumequeue/TopicPay: a BatchCQ topic" in out
    assert not (store / "consumequeue" / "TopicPay").exists()
    assert batch.read_bytes() != made_up and batch.stat().st_size == len(made_up)  # the store's file size kept
    assert [p.read_bytes() for p in (store / "batchconsumequeue.backup").glob("*/batchconsumequeue/TopicPay/0/*")] \
        == [made_up]
    _index_repaired(store, flags, lost, capsys)
    main(["verify", "--store", str(store), "--json"] + flags)
    assert json.loads(capsys.readouterr().out)["areas"]["batchconsumequeue"]["clean"]


def test_a_rocksdb_queue_store_rocksdb_cannot_open_is_reported_replaced_and_the_index_repaired(tmp_path, capsys):
    """Issue 34 turned the old skip into a repair: a consumequeue/ holding a database RocksDB cannot open is a
    problem for verify (the broker would not start), and backfill rebuilds it, the junk kept in the backup."""
    from rocketidx.consumequeue.rocksdb import read_table
    store, flags, lost = _store(tmp_path)
    shutil.rmtree(store / "consumequeue")
    db = store / "consumequeue"
    db.mkdir()
    for name, data in (("CURRENT", b"MANIFEST-000005\n"), ("MANIFEST-000005", b"\x00" * 64),
                       ("000007.sst", b"\x07" * 4096), ("OPTIONS-000009", b"[Version]\n"), ("LOG", b"log\n")):
        (db / name).write_bytes(data)
    before = _inodes(db)

    assert main(["verify", "--store", str(store), "--json"] + flags) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["areas"]["consumequeue"]["counts"] == {"unreadable": 1}
    assert "does not start" in report["restart"]["consumequeue"]["unreadable"]
    assert _inodes(db) == before

    out = _repair(store, flags, capsys)
    assert "consumequeue: a RocksDB database" in out and "cannot be opened" in out
    backup = next((store / "consumequeue.backup").iterdir()) / "consumequeue"
    assert {k: v[1] for k, v in _inodes(backup).items()} == {k: v[1] for k, v in before.items()}
    assert read_table(db).entry_count > 0
    _index_repaired(store, flags, lost, capsys)


@pytest.mark.parametrize("targets", ["consumequeue", "index,consumequeue"])
def test_the_plain_command_repairs_damaged_queues(tmp_path, capsys, targets):
    """Item 4: without --targets the queues are repaired too (the help said index only)."""
    store, flags, _ = _store(tmp_path)
    victim = sorted((store / "consumequeue" / "TopicOrders" / "0").iterdir())[-1]
    victim.unlink()
    assert main(["verify", "--store", str(store)] + flags) == 1
    capsys.readouterr()
    args = [] if targets == "index,consumequeue" else ["--targets", targets]
    assert main(["backfill", "--store", str(store), "--in-process"] + flags + args) == 0
    assert victim.exists()
    capsys.readouterr()
    if not args:
        assert main(["verify", "--store", str(store)] + flags) == 0, capsys.readouterr().out


def test_a_topics_json_that_is_not_the_broker_s_is_one_line_naming_it(tmp_path, capsys):
    """Bad input: a garbage config/topics.json stops the repair before anything moves, naming the file."""
    store, flags, _ = _store(tmp_path)
    (store / "config").mkdir()
    (store / "config" / "topics.json").write_bytes(b"\x00garbage{")
    before = _inodes(store)
    assert main(["backfill", "--store", str(store), "--in-process"] + flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(store / "config" / "topics.json") in err[0] and "topicConfigTable" in err[0]
    assert _inodes(store) == before
