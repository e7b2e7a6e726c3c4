"""rocketidx backfill: refuses a running broker's store, plans, rebuilds what a crash lost, installs
safely, and ends with an index that answers like a full rebuild; a second run changes nothing."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from brokerstore import ITEMS, SLOTS, assert_answers_like_full_rebuild, broker_store, crash, snapshot
from refdata import EXTERNAL
from rocketidx.backfill.index import make_plan, run_backfill
from rocketidx.build.in_process import build_index
from rocketidx.config import BuildConfig
from rocketidx.broker.store import read_checkpoint, write_checkpoint_index_ts
from rocketidx.cli import main
from rocketidx.errors import StoreLayoutError, StoreLockedError
import rocketidx.layout as L
from rocketidx.query.lookup import open_index, query_offsets

def test_crashed_broker_store_is_backfilled_and_answers_like_a_full_rebuild(tmp_path):
    store, files = broker_store(tmp_path, 12000)
    assert len(files) >= 9
    crash(store, files, keep=5, deleted=2)
    checkpoint_before = (store / "checkpoint").read_bytes()
    plan = make_plan(store, hash_slot_num=SLOTS, index_num=ITEMS)
    statuses = [f.status for f in plan.files]
    assert statuses == ["keep"] * 5 + ["broker-deletes"] * (len(files) - 7)
    assert plan.rebuild_from == files[4]["end_phy_offset"]
    result = run_backfill(store, hash_slot_num=SLOTS, index_num=ITEMS, timezone_name="UTC", log=lambda *_: None)
    names = sorted(os.listdir(store / "index"))
    assert names[:5] == [f["name"] for f in files[:5]]
    assert len(names) == 5 + len(result.installed)
    assert names == sorted(names) and result.installed[0] > files[4]["name"]
    # Replaced files and the old checkpoint are in the backup; nothing was deleted.
    backup = Path(result.backup_dir)
    assert sorted(p.name for p in backup.iterdir()) == ["checkpoint", "index", "journal.json"]
    assert sorted(p.name for p in (backup / "index").iterdir()) == \
        sorted(f.name for f in plan.files if f.status != "keep")
    assert (backup / "checkpoint").read_bytes() == checkpoint_before
    journal = json.loads((backup / "journal.json").read_text())
    assert journal["installed"] == result.installed and "finished" in journal
    # The checkpoint's indexMsgTimestamp is the newest installed endTimestamp; its other bytes are untouched.
    cp = read_checkpoint(store)
    newest = max(f.header.end_timestamp for f in open_index(store / "index", SLOTS, ITEMS))
    assert cp["index_msg_timestamp_ms"] == result.checkpoint_index_ts == newest
    after = (store / "checkpoint").read_bytes()
    assert after[:16] == checkpoint_before[:16] and after[24:] == checkpoint_before[24:]
    assert assert_answers_like_full_rebuild(store, tmp_path / "full", plan.rebuild_from) > 1000
    assert main(["verify", "--index", str(store / "index"), "--hash-slots", str(SLOTS), "--index-num", str(ITEMS),
                 "--commitlog", str(store)]) == 0


def test_second_run_is_a_no_op_that_says_so(tmp_path, capsys):
    store, files = broker_store(tmp_path, 8000)
    crash(store, files, keep=2, deleted=0)
    # The plain command repairs the index and the queues (this store has none: they are written).
    args = ["backfill", "--store", str(store), "--hash-slots", str(SLOTS), "--index-num", str(ITEMS)]
    assert main(args) == 0
    assert "consumequeue: replaced 0, wrote" in capsys.readouterr().out
    before = snapshot(store)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "nothing to do" in out and "nothing to change: every queue file is the rebuild's" in out
    assert snapshot(store) == before


def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path, capsys):
    store, files = broker_store(tmp_path, 8000)
    crash(store, files, keep=3, deleted=1)
    before = snapshot(store)
    assert main(["backfill", "--store", str(store), "--hash-slots", str(SLOTS), "--index-num", str(ITEMS),
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "broker-deletes" in out and "rebuild CommitLog offsets" in out and "replace" in out
    assert snapshot(store) == before


def test_a_running_broker_holding_the_lock_stops_everything(tmp_path, capsys):
    store, files = broker_store(tmp_path, 3000)
    crash(store, files, keep=1, deleted=0)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(store / 'lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = snapshot(store)
        with pytest.raises(StoreLockedError, match="broker is running"):
            run_backfill(store, hash_slot_num=SLOTS, index_num=ITEMS, log=lambda *_: None)
        assert main(["backfill", "--store", str(store), "--hash-slots", str(SLOTS), "--index-num", str(ITEMS)]) == 2
        assert "lock" in capsys.readouterr().err
        assert snapshot(store) == before
    finally:
        holder.kill()
        holder.wait()


def test_a_damaged_file_is_replaced_with_everything_after_it(tmp_path):
    store, files = broker_store(tmp_path, 12000)
    write_checkpoint_index_ts(store, files[-1]["end_timestamp"])  # a clean stop: nothing the broker deletes
    victim = store / "index" / files[3]["name"]
    raw = bytearray(victim.read_bytes())
    raw[40 + 4 * SLOTS + 20 * 7 + 16:40 + 4 * SLOTS + 20 * 7 + 20] = (999).to_bytes(4, "big")
    victim.write_bytes(bytes(raw))
    plan = make_plan(store, hash_slot_num=SLOTS, index_num=ITEMS)
    assert [f.status for f in plan.files][:5] == ["keep", "keep", "keep", "damaged", "after-damaged"]
    run_backfill(store, hash_slot_num=SLOTS, index_num=ITEMS, timezone_name="UTC", log=lambda *_: None)
    assert main(["verify", "--index", str(store / "index"), "--hash-slots", str(SLOTS), "--index-num", str(ITEMS),
                 "--commitlog", str(store)]) == 0
    assert_answers_like_full_rebuild(store, tmp_path / "full", files[2]["end_phy_offset"])


def test_sizes_that_do_not_fit_the_files_are_a_clear_error(tmp_path):
    store, _ = broker_store(tmp_path, 2000)
    with pytest.raises(StoreLayoutError, match="--hash-slots"):
        make_plan(store, hash_slot_num=SLOTS + 1, index_num=ITEMS)
    with pytest.raises(StoreLayoutError, match="--hash-slots"):
        make_plan(store, hash_slot_num=L.DEFAULT_HASH_SLOT_NUM, index_num=L.DEFAULT_INDEX_NUM)


def test_sizes_default_to_the_existing_files(tmp_path):
    store, files = broker_store(tmp_path, 8000)
    assert len(files) >= 3  # full files pin indexNum, hence the slots
    plan = make_plan(store)
    assert (plan.hash_slot_num, plan.index_num) == (SLOTS, ITEMS)
    # A lone partly filled file says nothing on its own; one flag and the file size give the other.
    for f in files[1:]:
        (store / "index" / f["name"]).unlink()
    plan = make_plan(store, index_num=ITEMS)
    assert (plan.hash_slot_num, plan.index_num) == (SLOTS, ITEMS)
    plan = make_plan(store, hash_slot_num=SLOTS)
    assert (plan.hash_slot_num, plan.index_num) == (SLOTS, ITEMS)
    (store / "index" / files[0]["name"]).write_bytes(bytes(40 + 4 * SLOTS + 20 * ITEMS))  # all zero: not full
    with pytest.raises(StoreLayoutError, match="--hash-slots"):
        make_plan(store)


def test_copied_store_of_another_implementation(tmp_path):
    src = EXTERNAL / "rocketmq-rust-v0.9.0" / "store"
    store = tmp_path / "store"
    shutil.copytree(src, store)
    for p in store.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    original = (store / "index").iterdir().__next__().read_bytes()
    plan = make_plan(store, hash_slot_num=32, index_num=128)
    assert plan.nothing_to_do  # its index covers its CommitLog
    # After a crash with an old checkpoint the broker would drop the file; backfill rebuilds it.
    write_checkpoint_index_ts(store, 0)
    (store / "abort").touch()
    r = run_backfill(store, hash_slot_num=32, index_num=128, timezone_name="UTC", log=lambda *_: None)
    assert len(r.installed) == 1
    assert (store / "index" / r.installed[0]).read_bytes() == original
    files = open_index(store / "index", 32, 128)
    assert len(query_offsets(files, "V1UpgradeTopic", "v1-upgrade-key")) == 2


class _Killed(BaseException):
    """Stands for kill -9 at one step of the install (BaseException: nothing in the backfill catches it)."""


@pytest.mark.parametrize("die_at", [0, 1, 2, 3, 4, 6, 9, 12, -4, -3, -2, -1])  # < 0: from the last step
def test_a_backfill_stopped_at_any_step_of_its_install_is_rolled_back_by_the_next_run(tmp_path, monkeypatch,
                                                                                       die_at):
    """Issue 12 (kills during backfill): the install is a sequence of renames, journal writes and the
    checkpoint; stopped after any ``die_at`` of them, no file is lost (each is in index/ or the backup,
    byte for byte), and the next run rolls the install back, then ends exactly where an uninterrupted
    backfill ends (same index/ bytes, same checkpoint)."""
    import rocketidx.backfill.index as bf
    store, files = broker_store(tmp_path, 12000)
    crash(store, files, keep=5, deleted=2)
    damaged = store / "index" / files[5]["name"]  # a damaged file too, so the install replaces a file
    raw = bytearray(damaged.read_bytes())
    raw[40 + 4 * SLOTS + 20 * 7 + 16:40 + 4 * SLOTS + 20 * 7 + 20] = (999).to_bytes(4, "big")
    damaged.write_bytes(bytes(raw))
    twin = tmp_path / "twin"
    shutil.copytree(store, twin)
    before = {p.name: p.read_bytes() for p in (store / "index").iterdir()}
    real_rename, real_replace = os.rename, os.replace

    def install_steps(where: Path, die: int | None) -> dict:
        """Count (and at ``die``, stop at) every rename of the install: journal, moves, checkpoint."""
        steps = {"n": 0}

        def counted(real):
            def step(a, b):
                b = Path(b)
                if "index.backup" in str(b) or b.parent == where / "index" or b == where / "checkpoint":
                    if steps["n"] == die:
                        raise _Killed()
                    steps["n"] += 1
                return real(a, b)
            return step
        monkeypatch.setattr(bf.os, "rename", counted(real_rename))
        monkeypatch.setattr(bf.os, "replace", counted(real_replace))
        return steps

    total = install_steps(twin, None)
    run_backfill(twin, hash_slot_num=SLOTS, index_num=ITEMS, timezone_name="UTC", log=lambda *_: None)
    monkeypatch.undo()
    assert total["n"] >= 14  # journal, >= 3 moves and >= 3 installs (each journaled), checkpoint, journal
    want = {p.name: p.read_bytes() for p in (twin / "index").iterdir()}
    die_at %= total["n"]
    install_steps(store, die_at)
    with pytest.raises(_Killed):
        run_backfill(store, hash_slot_num=SLOTS, index_num=ITEMS, timezone_name="UTC", log=lambda *_: None)
    monkeypatch.undo()
    backups = sorted(b / "index" for b in (store / "index.backup").iterdir())
    for name, data in before.items():
        assert any(p.exists() and p.read_bytes() == data for p in [store / "index" / name] +
                   [b / name for b in backups]), name
    if die_at == 0:  # stopped before its journal existed: nothing has moved yet
        assert {p.name: p.read_bytes() for p in (store / "index").iterdir()} == before
    else:
        assert bf.interrupted(store)
    said = []
    run_backfill(store, hash_slot_num=SLOTS, index_num=ITEMS, timezone_name="UTC", log=said.append)
    assert any("rolled back" in s for s in said) == (die_at > 0)
    assert not bf.interrupted(store)
    assert {p.name: p.read_bytes() for p in (store / "index").iterdir()} == want
    assert (store / "checkpoint").read_bytes() == (twin / "checkpoint").read_bytes()


def test_a_kept_file_after_one_the_broker_deletes_is_replaced_too(tmp_path, monkeypatch):
    """Store times may step back (a clock correction): file 1 can end before file 0 does. A crash whose
    checkpoint lies between deletes file 0 and keeps file 1; the backfill must rebuild file 0's range, so it
    replaces file 1 as well (the kept files stay a prefix). Found by make faults' indexloss part: before, file
    0's keys were lost after the repair."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "campaigns"))
    import index_loss_faults
    from index_loss_faults import step_clock_back
    store, files = broker_store(tmp_path, 8000)
    monkeypatch.setattr(index_loss_faults, "SEGMENT_BYTES", 2 << 20)  # broker_store's segments
    step_clock_back(store, [files[1]["end_phy_offset"]], 2_000_000)
    shutil.rmtree(store / "index")
    shutil.rmtree(tmp_path / "full")
    manifest, _ = build_index(store, tmp_path / "full", BuildConfig(hash_slot_num=SLOTS, index_num=ITEMS,
                                                                   window_ms=0, timezone="UTC"))
    files = manifest["files"]
    assert files[1]["end_timestamp"] < files[0]["end_timestamp"]
    shutil.copytree(tmp_path / "full" / "index", store / "index")
    write_checkpoint_index_ts(store, files[1]["end_timestamp"])  # file 0 and files 2.. go, file 1 stays
    (store / "abort").touch()
    plan = make_plan(store, hash_slot_num=SLOTS, index_num=ITEMS)
    assert [s.status for s in plan.files[:2]] == ["broker-deletes", "after-damaged"]
    run_backfill(store, hash_slot_num=SLOTS, index_num=ITEMS, timezone_name="UTC", log=lambda *_: None)
    assert assert_answers_like_full_rebuild(store, tmp_path / "full", 0) > 1000
