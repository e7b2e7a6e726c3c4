"""verify --store: a stopped broker's whole store (index, ConsumeQueues, checkpoint) against its CommitLog, the
crash scenarios issue 23 names each found in its area, with what a restart would do; state is not a problem."""
from __future__ import annotations

import fcntl
import json
import os

import pytest

from refdata import GOLDEN_CASES
from store_scenarios import NAMED, log_end, scenario, store_of, told

from rocketidx.cli import main
from rocketidx.broker.store import write_checkpoint_fields, write_checkpoint_index_ts
from rocketidx.commitlog.segments import list_segments
from rocketidx.verify.store import _first_store_time, verify_store

CASES = [c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists()]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_reference_store_is_clean_and_its_state_is_told(case, tmp_path):
    store, sizes = store_of(case, tmp_path / "store")
    report = verify_store(store, **sizes)
    assert report.clean, {k: dict(v.counts) for k, v in report.areas.items()}
    assert set(report.areas) == {"index", "consumequeue", "checkpoint"}
    assert report.state["abort"] is False and report.state["lock"] == "absent"
    # A clean stop with every queue whole: only records past the queues' highest end are dispatched again
    # (g5 ends in transaction messages no queue takes), and nothing is lost.
    model = report.state["restart_model"]
    assert model["kind"] == "clean" and model["log_end"] == log_end(case)
    if model["dispatch_from_phy_offset"] == log_end(case):
        assert model["redispatch_from"] is None and model["reindex_from"] is None
    else:
        assert model["redispatch_from"] == model["dispatch_from_phy_offset"] + 1
    assert model["index"]["lost_entries"] == 0


@pytest.mark.parametrize("name", sorted(NAMED))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_crash_scenario_is_named_with_what_a_restart_does(case, name, tmp_path):
    store, sizes = store_of(case, tmp_path / "store")
    scenario(name, store, case)
    report = verify_store(store, **sizes)
    cq = report.areas["consumequeue"]
    assert told(report, name), (dict(cq.counts), report.state["restart_model"]["consumequeue"])
    assert report.areas["index"].clean  # the damage stays in its area
    assert all(report.restart["consumequeue"][k] for k in cq.counts)


def test_a_crash_with_an_old_checkpoint_reports_the_index_files_a_restart_deletes(tmp_path):
    """IndexService.load deletes the files past indexMsgTimestamp; what recoverAbnormally re-dispatches from
    the checkpoint's min(physic, logics) - 3 s restores the rest: only entries below it are lost."""
    case = CASES[0]
    store, sizes = store_of(case, tmp_path / "store")
    ends = sorted(int.from_bytes(p.read_bytes()[8:16], "big") for p in (store / "index").iterdir())
    write_checkpoint_index_ts(store, ends[-1])
    (store / "abort").write_bytes(b"")
    assert verify_store(store, **sizes).clean  # a crash is state: nothing is lost at this checkpoint
    write_checkpoint_index_ts(store, ends[len(ends) // 2])
    report = verify_store(store, **sizes)  # physic/logics 0: recovery starts at the first segment
    model = report.state["restart_model"]
    assert len(model["index_deleted"]) == sum(e > ends[len(ends) // 2] for e in ends) > 0
    assert model["redispatch_from"] == 0 and model["index"]["lost_entries"] == 0 and report.clean
    assert model["index"]["restored_entries"] > 0
    newest = _first_store_time(list_segments(str(store / "commitlog"))[-1], True)  # the last segment's first
    write_checkpoint_fields(store, {"physic_msg_timestamp_ms": newest + 3000, "logics_msg_timestamp_ms": newest + 3000})
    report = verify_store(store, **sizes)  # recovery from the last segment: the deleted files' older keys are lost
    model = report.state["restart_model"]
    segs = sorted(int(p.name) for p in (store / "commitlog").iterdir())
    assert model["redispatch_from"] == segs[-1]
    deleted = report.areas["checkpoint"].counts["index-deleted-on-restart"]
    assert 0 < deleted <= len(model["index_deleted"])
    assert "deletes these IndexFiles" in report.restart["checkpoint"]["index-deleted-on-restart"]
    lost = report.areas["index"].counts["uncovered"] + report.areas["index"].counts.get("missing", 0)
    assert lost == model["index"]["lost_entries"] > 0 and not report.clean


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


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_an_index_that_lost_its_newest_files_is_not_clean_though_the_queues_are(case, tmp_path, capsys):
    """Issue 31 item 1: a clean stop re-dispatches nothing below the queues' highest end, so every entry of
    the deleted files is lost to queryMsgByKey; verify --index and verify --store both say so."""
    store, sizes = store_of(case, tmp_path / "store")
    names = sorted(p.name for p in (store / "index").iterdir())
    if len(names) < 3:
        pytest.skip("fewer than three IndexFiles")
    gone = 0
    for name in names[-2:]:
        gone += int.from_bytes((store / "index" / name).read_bytes()[36:40], "big") - 1  # indexCount - 1
        (store / "index" / name).unlink()
    flags = ["--hash-slots", str(sizes["hash_slot_num"]), "--index-num", str(sizes["index_num"])]
    assert main(["verify", "--index", str(store / "index"), "--commitlog", str(store), "--json"] + flags) == 1
    alone = json.loads(capsys.readouterr().out)
    lost = alone["counts"].get("uncovered", 0) + alone["counts"].get("missing", 0)
    assert lost == gone > 0 and alone["gaps"] and not alone["gaps"][-1]["restored"]
    assert main(["verify", "--store", str(store), "--json"] + flags) == 1
    report = json.loads(capsys.readouterr().out)
    model = report["state"]["restart_model"]
    assert model["kind"] == "clean" and model["index"]["lost_entries"] == gone
    assert model["index"]["restored_entries"] == 0


def test_what_a_clean_restart_re_dispatches_depends_on_the_release_line(tmp_path):
    """5.x recoverNormally dispatches records past D strictly; 4.9.8's start() resumes at D, that record
    included. Queues that lost the last two segments' entries: both restore the index's lost tail."""
    case = CASES[0]
    store, sizes = store_of(case, tmp_path / "store")
    scenario("crash-across-segments", store, case)
    names = sorted(p.name for p in (store / "index").iterdir())
    (store / "index" / names[-1]).unlink()
    new = verify_store(store, **sizes)
    old = verify_store(store, broker_version="4.9.8", **sizes)
    D = new.state["restart_model"]["dispatch_from_phy_offset"]
    assert D == old.state["restart_model"]["dispatch_from_phy_offset"] > 0
    assert new.state["restart_model"]["redispatch_from"] == D + 1
    assert old.state["restart_model"]["redispatch_from"] == D
    for r in (new, old):
        idx = r.state["restart_model"]["index"]
        assert idx["restored_entries"] > 0 and r.state["restart_model"]["version"] in ("5.x", "4.9.x")
    with pytest.raises(Exception, match="broker-version"):
        verify_store(store, broker_version="3.2", **sizes)
