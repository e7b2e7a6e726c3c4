"""backfill --store --targets consumequeue --dry-run: the repair plan of a stopped broker's queues. Each crash
scenario's damaged files are planned for replacing or writing, healthy ones kept, strays removed; a store
whose consumequeue/ holds something that is not a queue file is refused in one line, and nothing changes."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from refdata import GOLDEN_CASES
from store_scenarios import NAMED, biggest, scenario, store_of

from rocketidx.backfill.queues import make_queue_plan, repair_queues
from rocketidx.cli import main
from rocketidx.errors import StoreLayoutError
from rocketidx.verify.store import verify_store

CASES = [c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists()]


def snapshot(store: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(store)): (p.stat().st_ino, p.read_bytes()) for p in store.rglob("*") if p.is_file()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_reference_store_needs_nothing(case, tmp_path):
    store, _ = store_of(case, tmp_path / "store")
    plan = make_queue_plan(store, str(tmp_path / "scratch"))
    assert plan.changes == 0 and plan.actions["keep"] and plan.file_size == 1280
    assert plan.size_from.endswith("queue files")


@pytest.mark.parametrize("name", sorted(NAMED))
@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: c.name)
def test_each_crash_scenario_plans_the_damaged_files_only(case, name, tmp_path):
    store, _ = store_of(case, tmp_path / "store")
    before = {str(p.relative_to(store / "consumequeue")) for p in (store / "consumequeue").rglob("*") if p.is_file()}
    q = biggest(store)
    scenario(name, store, case)
    # The store's files tell the size; where consumequeue/ is gone, the broker's setting does.
    plan = make_queue_plan(store, str(tmp_path / "scratch"), cq_file_size=1280)
    changed = set(plan.actions["replace"]) | set(plan.actions["write"])
    assert changed and not plan.actions["remove"]
    assert set(plan.actions["keep"]) | changed == before  # the rebuild is the reference's files, all of them
    if name in ("queue-deleted", "newest-files-deleted", "dirty-tail", "truncated-mid-entry"):
        assert {c.rsplit("/", 1)[0] for c in changed} == {str(q.relative_to(store / "consumequeue"))}


def test_a_stray_queue_is_removed_and_the_command_changes_nothing(tmp_path, capsys):
    case = CASES[0]
    store, _ = store_of(case, tmp_path / "store")
    q = biggest(store)
    shutil.copytree(q, q.parent / "77")
    before = snapshot(store)
    assert main(["backfill", "--store", str(store), "--targets", "consumequeue", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["consumequeue"]["plan"]
    assert plan["counts"]["remove"] == len(list(q.iterdir())) and plan["counts"]["write"] == 0
    assert all(r.startswith(f"{q.parent.name}/77/") for r in plan["remove"])
    assert snapshot(store) == before
    assert main(["backfill", "--store", str(store), "--targets", "consumequeue", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)["consumequeue"]
    assert done["plan"]["counts"]["remove"] == len(list(q.iterdir())) and done["backup_dir"]
    assert not (q.parent / "77").exists()
    assert tree(store / "consumequeue") == tree(case / "expected" / "consumequeue")


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", sorted(NAMED))
@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: c.name)
def test_each_crash_scenario_is_repaired_to_the_clean_build_and_healthy_files_keep_their_inode(case, name, tmp_path):
    store, sizes = store_of(case, tmp_path / "store")
    scenario(name, store, case)
    damaged = snapshot(store)
    r = repair_queues(store, cq_file_size=1280, log=lambda *_: None)
    assert tree(store / "consumequeue") == tree(case / "expected" / "consumequeue")
    after = snapshot(store)
    for rel in r.plan.actions["keep"]:
        assert after[f"consumequeue/{rel}"] == damaged[f"consumequeue/{rel}"]  # same inode, same bytes
    backup = Path(r.backup_dir) / "consumequeue"
    for rel in r.plan.actions["replace"] + r.plan.actions["remove"]:
        assert (backup / rel).read_bytes() == damaged[f"consumequeue/{rel}"][1]
    assert verify_store(store, **sizes).clean
    assert not (store / "consumequeue.rocketidx-staging").exists()
    again = repair_queues(store, cq_file_size=1280, log=lambda *_: None)
    assert again.plan.changes == 0 and again.backup_dir is None


@pytest.mark.parametrize("moves", [0, 1, 2, 3])
def test_a_repair_killed_midway_is_rolled_back_by_the_next_run(moves, tmp_path, monkeypatch):
    import rocketidx.backfill.queues as bq
    case = CASES[1]
    store, _ = store_of(case, tmp_path / "store")
    scenario("newest-files-deleted", store, case)
    scenario("dirty-tail", store, case)
    damaged = {k: v[1] for k, v in snapshot(store).items() if k.startswith("consumequeue/")}
    real, done = os.rename, []

    def dying(src, dst):
        if len(done) == moves:
            raise KeyboardInterrupt("killed")  # what a kill leaves: the journal and the moves made so far
        done.append(src)
        real(src, dst)
    monkeypatch.setattr(bq.os, "rename", dying)
    with pytest.raises(KeyboardInterrupt):
        repair_queues(store, log=lambda *_: None)
    monkeypatch.setattr(bq.os, "rename", real)
    [(backup, journal)] = bq.interrupted_queue_repairs(store)
    bq.roll_back_queues(store, backup, journal)
    assert {k: v[1] for k, v in snapshot(store).items() if k.startswith("consumequeue/")} == damaged
    assert not bq.interrupted_queue_repairs(store)
    scenario("queue-deleted", store, case)  # and once more, killed, then a plain rerun finishes it
    monkeypatch.setattr(bq.os, "rename", dying)
    done.clear()
    with pytest.raises(KeyboardInterrupt):
        repair_queues(store, log=lambda *_: None)
    monkeypatch.setattr(bq.os, "rename", real)
    r = repair_queues(store, log=lambda *_: None)
    assert len(r.rolled_back) == 1
    assert tree(store / "consumequeue") == tree(case / "expected" / "consumequeue")


def test_a_running_broker_is_refused_and_nothing_changes(tmp_path, capsys):
    import fcntl
    case = CASES[0]
    store, _ = store_of(case, tmp_path / "store")
    scenario("queue-deleted", store, case)
    (store / "lock").write_bytes(b"")
    before = snapshot(store)
    fd = os.open(store / "lock", os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    try:
        pid = os.fork()
        if pid == 0:  # another process: the POSIX lock is per process
            code = main(["backfill", "--store", str(store), "--targets", "consumequeue"])
            os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 2
    assert snapshot(store) == before


@pytest.mark.parametrize("stray", ["name", "queue-dir", "topic-file"])
def test_something_that_is_not_a_queue_file_is_refused_in_one_line(stray, tmp_path, capsys):
    case = CASES[0]
    store, _ = store_of(case, tmp_path / "store")
    q = biggest(store)
    target = {"name": q / "notes.txt", "queue-dir": q.parent / "x1", "topic-file": store / "consumequeue" / "README"}
    if stray == "queue-dir":
        target[stray].mkdir()
    else:
        target[stray].write_text("x")
    before = snapshot(store)
    with pytest.raises(StoreLayoutError, match="move it out of consumequeue/ first"):
        make_queue_plan(store, str(tmp_path / "scratch"))
    assert main(["backfill", "--store", str(store), "--targets", "consumequeue", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(target[stray]) in err[0]
    assert snapshot(store) == before


def test_queue_files_of_no_shared_size_are_refused_naming_two(tmp_path):
    case = CASES[0]
    store, _ = store_of(case, tmp_path / "store")
    files = sorted(p for p in (store / "consumequeue").rglob("*") if p.is_file())
    for f in files[: len(files) // 2 + 1]:
        with open(f, "ab") as fh:
            fh.write(bytes(20 * (1 + files.index(f) % 3)))
    with pytest.raises(StoreLayoutError, match="no file size is shared by most"):
        make_queue_plan(store, str(tmp_path / "scratch"))


def test_both_targets_repair_the_queues_and_leave_a_healthy_index_alone(tmp_path, capsys):
    case = CASES[0]
    store, sizes = store_of(case, tmp_path / "store")
    scenario("dirty-tail", store, case)
    index_before = {k: v for k, v in snapshot(store).items() if k.startswith("index/")}
    assert main(["backfill", "--store", str(store), "--targets", "index,consumequeue", "--hash-slots",
                 str(sizes["hash_slot_num"]), "--index-num", str(sizes["index_num"]), "--in-process", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["consumequeue"]["plan"]["counts"]["replace"] == 1
    assert tree(store / "consumequeue") == tree(case / "expected" / "consumequeue")
    assert {k: v for k, v in snapshot(store).items() if k.startswith("index/")} == index_before
    assert verify_store(store, **sizes).clean
