"""Backfill with the rebuild on Spark: the same files as the in-process backfill (also when the range
starts inside a message whose first entries the kept file already holds), an index that answers like a
full rebuild, and ``jobs/backfill.py`` as an operator runs it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from brokerstore import ITEMS, SLOTS, assert_answers_like_full_rebuild, broker_store, crash, snapshot
from rocketidx.backfill.index import make_plan, run_backfill
from rocketidx.config import BuildConfig
from rocketidx.spark.backfill import SparkBuilder, run_backfill_spark
from rocketidx.spark.build import build_index_spark
from rocketidx.spark.session import SparkSettings

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "jobs" / "backfill.py"


def index_bytes(store: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((store / "index").iterdir())}


def crash_mid_message(store: Path, files: list[dict]) -> int:
    """Crash after the first file whose last message continues in the next file; returns files kept."""
    for keep in range(1, len(files) - 1):
        if files[keep - 1]["end_phy_offset"] == files[keep]["begin_phy_offset"]:
            crash(store, files, keep=keep, deleted=1)
            return keep
    pytest.fail("no file of the generated store ends inside a message; change the sizes")


def test_spark_backfill_equals_the_in_process_one_and_answers_like_a_full_rebuild(spark, tmp_path):
    store, files = broker_store(tmp_path, 12000)
    keep = crash_mid_message(store, files)
    plan = make_plan(store)
    assert plan.skip_entries > 0 and plan.rebuild_from == files[keep - 1]["end_phy_offset"]
    core_store = tmp_path / "core-store"
    shutil.copytree(store, core_store)
    run_backfill(core_store, timezone_name="UTC", log=lambda *_: None)

    result, stats = run_backfill_spark(store, spark=spark, split_bytes=256 * 1024, partitions=3,
                                       timezone_name="UTC", log=lambda *_: None)
    # One window (as the broker writes): the direct plan reads the range in one task, no shuffle.
    assert stats["mode"] == "direct" and stats["partitions"] == 1
    assert result.installed and result.installed[0] > files[keep - 1]["name"]
    assert index_bytes(store) == index_bytes(core_store)
    assert assert_answers_like_full_rebuild(store, tmp_path / "full", plan.rebuild_from) > 1000
    # Its own result is a no-op that says so, and changes nothing.
    before = snapshot(store)
    lines: list[str] = []
    again, _ = run_backfill_spark(store, spark=spark, log=lines.append)
    assert again.plan.nothing_to_do and not again.installed and "nothing to do" in "\n".join(lines)
    assert snapshot(store) == before


def test_skip_entries_drops_exactly_the_entries_the_kept_file_holds(spark, tmp_path):
    store, files = broker_store(tmp_path, 6000)
    keep = crash_mid_message(store, files)
    start = files[keep - 1]["end_phy_offset"]
    plan = make_plan(store)
    config = BuildConfig(hash_slot_num=SLOTS, index_num=ITEMS, window_ms=0, timezone="UTC")
    from rocketidx.build.in_process import build_index
    core, core_summary = build_index(store / "commitlog", tmp_path / "core", config, start_offset=start,
                                     skip_entries=plan.skip_entries, name_after=files[keep - 1]["name"])
    got, summary = build_index_spark(store / "commitlog", tmp_path / "spark", config, spark=spark,
                                     split_bytes=128 * 1024, shuffle_partitions=2, start_offset=start,
                                     skip_entries=plan.skip_entries, name_after=files[keep - 1]["name"])
    assert (summary.entries, summary.messages_indexed) == (core_summary.entries, core_summary.messages_indexed)
    assert [f["name"] for f in got["files"]] == [f["name"] for f in core["files"]]
    assert got["files"][0]["name"] > files[keep - 1]["name"]
    for f in core["files"]:
        assert (tmp_path / "spark" / "index" / f["name"]).read_bytes() == \
            (tmp_path / "core" / "index" / f["name"]).read_bytes()


def test_the_session_starts_only_when_there_is_something_to_rebuild(tmp_path):
    store, files = broker_store(tmp_path, 3000)
    crash(store, files, keep=1, deleted=0)
    builder = SparkBuilder(SparkSettings(1 << 20, None, "local[1]", {}))
    run_backfill(store, dry_run=True, builder=builder, log=lambda *_: None)
    assert builder.spark is None


def test_backfill_job_dry_run_then_run(tmp_path):
    store, files = broker_store(tmp_path, 8000)
    crash(store, files, keep=2, deleted=1)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    before = snapshot(store)
    dry = subprocess.run([sys.executable, str(JOB), "--store", str(store), "--dry-run", "--json"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)["plan"]
    assert plan["rebuild_from"] == files[1]["end_phy_offset"] and snapshot(store) == before
    run = subprocess.run([sys.executable, str(JOB), "--store", str(store), "--master", "local[2]",
                          "--split-bytes", "512k", "--timezone", "UTC", "--json"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["installed"] and out["spark"]["splits"] > 1
    assert assert_answers_like_full_rebuild(store, tmp_path / "full", plan["rebuild_from"]) > 100
    missing = subprocess.run([sys.executable, str(JOB), "--store", str(tmp_path / "nowhere")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert missing.returncode == 2 and "nowhere" in missing.stderr


@pytest.mark.parametrize("name", ["crash-across-segments", "consumequeue-deleted", "dirty-tail"])
def test_a_whole_store_repair_on_spark_leaves_what_the_in_process_one_leaves(spark, name, tmp_path):
    from refdata import GOLDEN_CASES
    from store_scenarios import scenario, store_of
    from rocketidx.backfill.repair import repair_store
    from rocketidx.verify.store import verify_store
    case = [c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists()][1]
    stores = {}
    for engine in ("core", "spark"):
        store, sizes = store_of(case, tmp_path / engine)
        scenario(name, store, case)
        shutil.rmtree(store / "index")  # and the index lost: both targets from the one Spark build
        builder = SparkBuilder(SparkSettings(64 * 1024, 3, None, {}), spark) if engine == "spark" else None
        r = repair_store(store, builder=builder, cq_file_size=1280, timezone_name="UTC", log=lambda *_: None,
                         **sizes)
        assert r.index.installed and r.queues.plan.changes
        assert verify_store(store, **sizes).clean
        stores[engine] = {str(p.relative_to(store)): p.read_bytes() for d in ("index", "consumequeue")
                          for p in (store / d).rglob("*") if p.is_file()}
    assert stores["spark"] == stores["core"]
