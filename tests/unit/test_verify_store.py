"""verify --store: a stopped broker's whole store (index, ConsumeQueues, checkpoint) against its CommitLog, the
crash scenarios issue 23 names each found in its area, with what a restart would do; state is not a problem."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from refdata import GOLDEN_CASES

from rocketidx.cli import main
from rocketidx.output.broker import write_checkpoint_index_ts
from rocketidx.verify.store import verify_store

CASES = [c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists()]


def store_of(case: Path, where: Path) -> tuple[Path, dict]:
    """A broker's store as the reference case has it: the CommitLog, RocketMQ's IndexFiles and queues."""
    shutil.copytree(case / "commitlog", where / "commitlog")
    shutil.copytree(case / "expected" / "index", where / "index")
    shutil.copytree(case / "expected" / "consumequeue", where / "consumequeue")
    c = json.loads((case / "case.json").read_text())
    return where, {"hash_slot_num": c["hashSlotNum"], "index_num": c["indexNum"]}


def queues(store: Path) -> list[Path]:
    return sorted(q for t in (store / "consumequeue").iterdir() for q in t.iterdir())


def biggest(store: Path) -> Path:
    return max(queues(store), key=lambda q: len(list(q.iterdir())))


def log_end(case: Path) -> int:
    return int(json.loads((case / "expected" / "cq-manifest.json").read_text())["parse"]["stop"].split("abs ")[1]
               .split(")")[0])


def scenario(name: str, store: Path, case: Path) -> None:
    q = biggest(store)
    files = sorted(q.iterdir())
    if name == "consumequeue-deleted":
        shutil.rmtree(store / "consumequeue")
    elif name == "queue-deleted":
        shutil.rmtree(q)
    elif name == "newest-files-deleted":
        for f in files[-2:]:
            f.unlink()
    elif name == "truncated-mid-entry":
        os.truncate(files[0], 7 * 20 + 9)
    elif name == "dirty-tail":
        u = np.frombuffer(files[-1].read_bytes(), ">i8,>i4,>i8")
        free = int(np.flatnonzero(u["f1"] == 0)[0])
        with open(files[-1], "r+b") as f:
            f.seek(free * 20)
            f.write(np.array([(log_end(case) + 50, 300, 0)], ">i8,>i4,>i8").tobytes())
    elif name == "copied-from-another-broker":  # another broker's entries: the same names, other contents
        a, b = queues(store)[:2]
        for f in a.iterdir():
            if (b / f.name).exists():
                shutil.copyfile(b / f.name, f)
    else:
        raise AssertionError(name)


NAMED = {"consumequeue-deleted": "missing-queue", "queue-deleted": "missing-queue",
         "newest-files-deleted": "missing-file", "truncated-mid-entry": "file-size", "dirty-tail": "dirty-tail",
         "copied-from-another-broker": "wrong-field"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_reference_store_is_clean_and_its_state_is_told(case, tmp_path):
    store, sizes = store_of(case, tmp_path / "store")
    report = verify_store(store, **sizes)
    assert report.clean, {k: dict(v.counts) for k, v in report.areas.items()}
    assert set(report.areas) == {"index", "consumequeue", "checkpoint"}
    assert report.state["abort"] is False and report.state["lock"] == "absent"
    assert report.state["recovery_start"]["offset"] in [int(p.name) for p in (store / "commitlog").iterdir()]


@pytest.mark.parametrize("name", sorted(NAMED))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_crash_scenario_is_named_with_what_a_restart_does(case, name, tmp_path):
    store, sizes = store_of(case, tmp_path / "store")
    scenario(name, store, case)
    report = verify_store(store, **sizes)
    cq = report.areas["consumequeue"]
    assert NAMED[name] in cq.counts, dict(cq.counts)
    assert report.areas["index"].clean  # the damage stays in its area
    assert all(report.restart["consumequeue"][k] for k in cq.counts)


def test_a_crash_with_an_old_checkpoint_reports_the_index_files_a_restart_deletes(tmp_path):
    case = CASES[0]
    store, sizes = store_of(case, tmp_path / "store")
    ends = sorted(int.from_bytes(p.read_bytes()[8:16], "big") for p in (store / "index").iterdir())
    write_checkpoint_index_ts(store, ends[-1])
    (store / "abort").write_bytes(b"")
    assert verify_store(store, **sizes).clean  # a crash is state: nothing is lost at this checkpoint
    write_checkpoint_index_ts(store, ends[len(ends) // 2])
    report = verify_store(store, **sizes)
    deleted = report.areas["checkpoint"].counts["index-deleted-on-restart"]
    assert deleted == sum(e > ends[len(ends) // 2] for e in ends) > 0
    assert "deletes these IndexFiles" in report.restart["checkpoint"]["index-deleted-on-restart"]


def test_the_command_exits_1_on_problems_and_a_held_lock_is_state(tmp_path, capsys):
    case = CASES[0]
    store, sizes = store_of(case, tmp_path / "store")
    args = ["verify", "--store", str(store), "--hash-slots", str(sizes["hash_slot_num"]), "--index-num",
            str(sizes["index_num"])]
    fd = os.open(store / "lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "lock held (flock)" in out and "clean: no problems found" in out
    finally:
        os.close(fd)
    scenario("queue-deleted", store, case)
    assert main(args + ["--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["areas"]["consumequeue"]["counts"]["missing-queue"] == 1 and not report["clean"]
    assert "re-dispatches" in report["restart"]["consumequeue"]["missing-queue"]
    assert main(args + ["--spark"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert main(["verify", "--store", str(tmp_path / "nowhere")]) == 2
    assert "no commitlog/" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists() and sorted(p.name for p in store.iterdir()) == \
        ["commitlog", "consumequeue", "index", "lock"]
