"""backfill --store --targets consumequeue --dry-run: the repair plan of a stopped broker's queues. Each crash
scenario's damaged files are planned for replacing or writing, healthy ones kept, strays removed; a store
whose consumequeue/ holds something that is not a queue file is refused in one line, and nothing changes."""
from __future__ import annotations

import json
import time
import os
import shutil
from pathlib import Path

import pytest

from refdata import GOLDEN_CASES
from store_scenarios import NAMED, biggest, scenario, store_of, told

from rocketidx.backfill.queues import make_queue_plan
from rocketidx.backfill.repair import repair_queues
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


def test_a_queue_no_rebuild_makes_is_left_alone_unless_named_by_the_flag(tmp_path, capsys):
    """Issue 31 item 5: a queue the CommitLog does not explain (here queueId 77 of a topic) is listed and left
    with its files and inodes; --remove-unexplained moves it to the backup, as repairs did before."""
    case = CASES[0]
    store, _ = store_of(case, tmp_path / "store")
    q = biggest(store)
    shutil.copytree(q, q.parent / "77")
    inodes = {p.name: p.stat().st_ino for p in (q.parent / "77").iterdir()}
    before = snapshot(store)
    assert main(["backfill", "--store", str(store), "--targets", "consumequeue", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["consumequeue"]["plan"]
    assert plan["counts"]["remove"] == 0 and plan["counts"]["write"] == 0
    assert plan["unexplained"] == {f"{q.parent.name}/77": "no record of this queue in the CommitLog: left as it is"}
    assert snapshot(store) == before
    assert main(["backfill", "--store", str(store), "--targets", "consumequeue", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)["consumequeue"]
    assert done["plan"]["counts"]["remove"] == 0 and not done["backup_dir"]
    assert {p.name: p.stat().st_ino for p in (q.parent / "77").iterdir()} == inodes
    assert main(["backfill", "--store", str(store), "--targets", "consumequeue", "--remove-unexplained",
                 "--json"]) == 0
    done = json.loads(capsys.readouterr().out)["consumequeue"]
    assert done["plan"]["counts"]["remove"] == len(list(q.iterdir())) and done["backup_dir"]
    assert all(r.startswith(f"{q.parent.name}/77/") for r in done["plan"]["remove"])
    assert not (q.parent / "77").exists()
    assert tree(store / "consumequeue") == tree(case / "expected" / "consumequeue")


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", sorted(NAMED))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_crash_scenario_is_named_then_repaired_to_the_clean_build_healthy_files_keeping_their_inode(
        case, name, tmp_path, capsys):
    store, sizes = store_of(case, tmp_path / "store")
    scenario(name, store, case)
    assert told(verify_store(store, cq_file_size=1280, **sizes), name)
    damaged = snapshot(store)
    flags = ["--hash-slots", str(sizes["hash_slot_num"]), "--index-num", str(sizes["index_num"]), "--cq-file-size",
             "1280", "--in-process", "--json"]
    assert main(["backfill", "--store", str(store), "--targets", "index,consumequeue", *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    plan = out["consumequeue"]["plan"]
    assert tree(store / "consumequeue") == tree(case / "expected" / "consumequeue")
    assert tree(store / "index") == tree(case / "expected" / "index")
    after = snapshot(store)
    changed = set(plan["replace"]) | set(plan["write"]) | set(plan["remove"])
    for rel in (k.split("/", 1)[1] for k in damaged if k.startswith("consumequeue/")):
        if rel not in changed:
            assert after[f"consumequeue/{rel}"] == damaged[f"consumequeue/{rel}"]  # same inode, same bytes
    assert {k: v for k, v in after.items() if k.startswith("index/")} == \
        {k: v for k, v in damaged.items() if k.startswith("index/")}
    backup = Path(out["consumequeue"]["backup_dir"]) / "consumequeue"
    for rel in plan["replace"] + plan["remove"]:
        assert (backup / rel).read_bytes() == damaged[f"consumequeue/{rel}"][1]
    assert verify_store(store, **sizes).clean
    assert not (store / "consumequeue.rocketidx-staging").exists() and not (store / "index.rocketidx-staging").exists()
    assert sorted(p.name for p in store.iterdir()) == ["commitlog", "consumequeue", "consumequeue.backup", "index",
                                                       "lock"]
    assert main(["backfill", "--store", str(store), "--targets", "index,consumequeue", *flags]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["consumequeue"]["plan"]["counts"] == {**plan["counts"], "keep": sum(plan["counts"].values())
                                                       - plan["counts"]["remove"], "replace": 0, "write": 0,
                                                       "remove": 0}
    assert again["consumequeue"]["backup_dir"] is None and again["plan"]["nothing_to_do"]
    assert snapshot(store) == after


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


def checkpoint(physic: int, logics: int, index: int) -> bytes:
    return (physic.to_bytes(8, "big") + logics.to_bytes(8, "big") + index.to_bytes(8, "big")).ljust(4096, b"\0")


@pytest.mark.parametrize("case", CASES[:4], ids=lambda c: c.name)
def test_the_checkpoint_says_the_queues_are_whole_to_the_log_end_and_a_roll_back_restores_it(case, tmp_path,
                                                                                               monkeypatch):
    import rocketidx.backfill.queues as bq
    from rocketidx.broker.store import read_checkpoint
    store, sizes = store_of(case, tmp_path / "store")
    messages = [json.loads(line) for line in (case / "messages.jsonl").read_text().splitlines()]
    newest = [m for m in messages if m["tranType"] in ("not", "commit")][-1]["storeTimestamp"]
    old = checkpoint(newest + 10**6, 1, 2**62)  # a crash: the queues' flush fell far behind the log's
    (store / "checkpoint").write_bytes(old)
    (store / "abort").write_bytes(b"")
    scenario("crash-across-segments", store, case)
    real = os.rename
    monkeypatch.setattr(bq.os, "rename", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt("killed")))
    with pytest.raises(KeyboardInterrupt):
        repair_queues(store, log=lambda *_: None)
    monkeypatch.setattr(bq.os, "rename", real)
    r = repair_queues(store, log=lambda *_: None)  # rolls the killed one back (the checkpoint too), then repairs
    assert len(r.rolled_back) == 1 and r.plan.changes
    cp = read_checkpoint(store)
    assert cp["logics_msg_timestamp_ms"] == newest
    assert (cp["physic_msg_timestamp_ms"], cp["index_msg_timestamp_ms"]) == (newest + 10**6, 2**62)
    assert (Path(r.backup_dir) / "checkpoint").read_bytes() == old
    assert (store / "checkpoint").read_bytes()[24:] == old[24:]
    assert tree(store / "consumequeue") == tree(case / "expected" / "consumequeue")


def test_a_lost_index_and_damaged_queues_are_rebuilt_from_one_read(tmp_path):
    from rocketidx.backfill.repair import repair_store
    from rocketidx.build.in_process import build_index
    case = CASES[0]
    store, sizes = store_of(case, tmp_path / "store")
    scenario("queue-deleted", store, case)
    shutil.rmtree(store / "index")
    calls = []

    def builder(*args, **kwargs):
        calls.append(kwargs.get("start_offset"))
        return build_index(*args, **kwargs)
    window = json.loads((case / "case.json").read_text())["windowMillis"]  # the reference's windows
    r = repair_store(store, builder=builder, window_ms=window, log=lambda *_: None, **sizes)
    assert calls == [None]  # the queues' build was the index's too
    assert r.index.installed and r.queues.plan.actions["write"]
    assert tree(store / "consumequeue") == tree(case / "expected" / "consumequeue")
    in_order = lambda d: [p.read_bytes() for p in sorted(d.iterdir())]  # noqa: E731 (names: this host's zone)
    assert in_order(store / "index") == in_order(case / "expected" / "index")
    assert verify_store(store, **sizes).clean


def test_a_damaged_index_falls_back_to_the_index_backfill_and_keeps_the_intact_files(tmp_path):
    from rocketidx.backfill.repair import repair_store
    case = next(c for c in CASES if len(list((c / "expected" / "index").iterdir())) > 1)
    store, sizes = store_of(case, tmp_path / "store")
    files = sorted((store / "index").iterdir())
    inode = files[0].stat().st_ino
    data = bytearray(files[-1].read_bytes())
    count = int.from_bytes(data[36:40], "big")  # the newest file's last item points elsewhere
    at = 40 + 4 * sizes["hash_slot_num"] + 20 * (count - 1)
    data[at + 4:at + 12] = (int.from_bytes(data[at + 4:at + 12], "big") + 1).to_bytes(8, "big")
    files[-1].write_bytes(bytes(data))
    r = repair_store(store, log=lambda *_: None, **sizes)
    assert r.index.plan.files[-1].status == "damaged" and files[-1].name in r.index.plan.replaced
    assert files[0].stat().st_ino == inode
    assert verify_store(store, **sizes).clean
    assert r.queues.plan.changes == 0


def test_an_index_equal_to_the_rebuild_is_kept_without_a_second_read(tmp_path, monkeypatch):
    import rocketidx.backfill.index as bs
    from rocketidx.backfill.repair import repair_store
    case = next(c for c in CASES if json.loads((c / "case.json").read_text())["windowMillis"] == 0)
    store, sizes = store_of(case, tmp_path / "store")  # RocketMQ's own files: one sequence, as the broker writes
    scenario("dirty-tail", store, case)
    index = {k: v for k, v in snapshot(store).items() if k.startswith("index/")}

    def no_second_read(*a, **k):
        raise AssertionError("the index was verified against the log again")
    monkeypatch.setattr(bs, "make_plan", no_second_read)
    r = repair_store(store, log=lambda *_: None, **sizes)
    assert r.index.plan.nothing_to_do and {f.reason for f in r.index.plan.files} == {"identical to the rebuild"}
    assert {k: v for k, v in snapshot(store).items() if k.startswith("index/")} == index
    assert tree(store / "consumequeue") == tree(case / "expected" / "consumequeue")


def test_a_killed_repairs_staging_is_removed_by_the_next_run_and_never_installed(tmp_path):
    from rocketidx.backfill.repair import repair_store
    case = CASES[0]
    store, sizes = store_of(case, tmp_path / "store")
    left = store / "consumequeue.rocketidx-staging" / "20260101T000000.000000000Z-1" / "consumequeue" / "T" / "0"
    left.mkdir(parents=True)
    (left / ("0" * 20)).write_bytes(bytes(1280))  # what a kill -9 in the middle of the build leaves
    lines = []
    assert repair_store(store, log=lines.append, **sizes).queues.plan.changes == 0
    assert not (store / "consumequeue.rocketidx-staging").exists() and not (store / "consumequeue" / "T").exists()
    assert any("interrupted repair's staging" in line for line in lines)


@pytest.mark.parametrize("kind", ["posix", "flock"])
@pytest.mark.parametrize("targets", ["consumequeue", "index,consumequeue"])
def test_a_store_locked_either_way_is_refused_in_one_line_and_nothing_changes(kind, targets, tmp_path, capsys):
    import fcntl
    case = CASES[0]
    store, sizes = store_of(case, tmp_path / "store")
    scenario("queue-deleted", store, case)
    (store / "lock").write_bytes(b"")
    before = snapshot(store)
    fd = os.open(store / "lock", os.O_RDWR)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the holder: another process (a POSIX lock is per process; a broker holds one)
        (fcntl.lockf if kind == "posix" else fcntl.flock)(fd, fcntl.LOCK_EX)
        os.write(w, b"x")
        time.sleep(30)
        os._exit(0)
    try:
        os.read(r, 1)
        code = main(["backfill", "--store", str(store), "--targets", targets, "--hash-slots",
                     str(sizes["hash_slot_num"]), "--index-num", str(sizes["index_num"]), "--in-process"])
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "lock" in err[0] and ("POSIX" in err[0] if kind == "posix" else "flock" in err[0])
    assert snapshot(store) == before


def test_a_store_without_commitlog_is_refused_in_one_line_and_nothing_changes(tmp_path, capsys):
    case = CASES[0]
    store, _ = store_of(case, tmp_path / "store")
    shutil.rmtree(store / "commitlog")
    before = snapshot(store)
    assert main(["backfill", "--store", str(store), "--targets", "index,consumequeue"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no commitlog/" in err[0] and str(store) in err[0]
    assert snapshot(store) == before and sorted(p.name for p in store.iterdir()) == ["consumequeue", "index"]
