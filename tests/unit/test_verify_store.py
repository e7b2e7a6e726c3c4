"""verify --store: a stopped broker's whole store (index, ConsumeQueues, checkpoint) against its CommitLog, the
crash scenarios issue 23 names each found in its area, with what a restart would do; state is not a problem."""
from __future__ import annotations

import fcntl
import json
import os

import pytest

from refdata import GOLDEN_CASES
from store_scenarios import NAMED, scenario, store_of

from rocketidx.cli import main
from rocketidx.output.broker import write_checkpoint_index_ts
from rocketidx.verify.store import verify_store

CASES = [c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists()]


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
    assert main(args + ["--commitlog", str(store / "commitlog")]) == 2  # the store's own log, always
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert main(["verify", "--store", str(tmp_path / "nowhere")]) == 2
    assert "no commitlog/" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists() and sorted(p.name for p in store.iterdir()) == \
        ["commitlog", "consumequeue", "index", "lock"]
