"""Light queues in a stopped broker's store (issue 34): with the broker's conf (enableMultiDispatch) verify
--store checks them and backfill --store repairs them like any other queue; without it they stay
unexplained, with the setting that would explain them; a 4.9 broker's nested directory for a name holding
'/' (which its own load skips) is listed and never touched."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from brokerstore import snapshot
from rocketidx.build.in_process import build_index
from rocketidx.cli import main
from rocketidx.config import BuildConfig, LightQueues
from rocketidx.sample.generate import GenConfig, generate_store

CQ_SIZE = 20 * 300


@pytest.fixture
def store(tmp_path) -> Path:
    """A store whose consumequeue/ a broker with enableLmq and enableMultiDispatch wrote (as rocketidx
    rebuilds it: the broker matrix holds the two equal), plus the nested directory a 4.9 broker writes."""
    s = tmp_path / "store"
    generate_store(s, GenConfig(messages=4000, segment_bytes=1 << 20, share_lmq=0.25, lmq_queues=6, seed=9))
    build_index(s, tmp_path / "built", BuildConfig(window_ms=0, timezone="UTC", targets=("consumequeue",),
                                                   cq_file_size=CQ_SIZE, light_queues=LightQueues(True, "none")))
    shutil.copytree(tmp_path / "built" / "consumequeue", s / "consumequeue")
    nested = s / "consumequeue" / "%LMQ%L1" / "nested" / "0"
    nested.mkdir(parents=True)
    (nested / ("0" * 20)).write_bytes(bytes(range(20)) * (CQ_SIZE // 20))
    (tmp_path / "broker.conf").write_text("enableLmq=true\nenableMultiDispatch=true\n"
                                          f"mappedFileSizeConsumeQueue={CQ_SIZE}\n")
    return s


def verify(store: Path, capsys, *extra: str) -> dict:
    """verify --store's report (the store has no index/ nor checkpoint: only its queues are judged here)."""
    main(["verify", "--store", str(store), "--json", "--broker-version", "4.9.8", *extra])
    return json.loads(capsys.readouterr().out)


def test_with_the_brokers_conf_the_light_queues_are_checked_and_clean(store, tmp_path, capsys):
    report = verify(store, capsys, "--broker-conf", str(tmp_path / "broker.conf"))
    unexplained = report["state"]["unexplained_queues"]
    assert report["areas"]["consumequeue"]["clean"], report["areas"]["consumequeue"]
    assert report["areas"]["consumequeue"]["expected_entries"] > 4000  # the light queues' too
    assert list(unexplained) == ["%LMQ%L1/nested"] and "its load skips" in unexplained["%LMQ%L1/nested"]


def test_without_it_they_are_unexplained_and_the_setting_is_named(store, capsys):
    report = verify(store, capsys)
    unexplained = report["state"]["unexplained_queues"]
    assert report["areas"]["consumequeue"]["clean"], report["areas"]["consumequeue"]
    lmq = [q for q in unexplained if q.startswith("%LMQ%L") and q.endswith("/0")]
    assert len(lmq) == 6 and all("enableMultiDispatch=true" in unexplained[q] for q in lmq)


def test_a_lost_light_queue_file_is_repaired_and_the_nested_directory_left(store, tmp_path, capsys):
    lost = store / "consumequeue" / "%LMQ%L3" / "0" / ("0" * 20)
    want = lost.read_bytes()
    lost.unlink()
    nested = {k: v for k, v in snapshot(store).items() if "nested" in k}
    code = main(["backfill", "--store", str(store), "--targets", "consumequeue", "--broker-conf",
                 str(tmp_path / "broker.conf"), "--broker-version", "4.9.8"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert lost.read_bytes() == want
    assert {k: v for k, v in snapshot(store).items() if "nested" in k} == nested
    assert "left     consumequeue/%LMQ%L1/nested" in out
    report = verify(store, capsys, "--broker-conf", str(tmp_path / "broker.conf"))
    assert report["areas"]["consumequeue"]["clean"], report["areas"]["consumequeue"]
