"""The Spark build gives the in-process build's bytes and manifest, and commits like it.

Every golden case and the external rocketmq-rust store, with every segment split, at 1, 2 and 7 writer
partitions: the IndexFiles byte for byte, ``_manifest.json`` and the summary (timing aside) equal
``rocketidx.build.in_process.build_index`` on the same CommitLog. Then the commit's promises: a lock against a
second build, a failed build leaves the previous output, re-running gives the same bytes.
"""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from refdata import EXTERNAL, GOLDEN_CASES, load_case
from scenarios import BASIC, SCENARIOS, lay_segment, props, write_segments

from rocketidx.build.in_process import build_index
from rocketidx.commitlog.entries import extract_entries
from rocketidx.config import BuildConfig
from rocketidx.errors import StoreLockedError
from rocketidx.index.reader import IndexFile
from rocketidx.output.local import output_lock
from rocketidx.spark.build import build_index_spark

from splitread import core_read, same_build

pytestmark = pytest.mark.spark

EXTERNAL_STORE = EXTERNAL / "rocketmq-rust-v0.9.0" / "store"
CASES = [pytest.param(c / "commitlog", BuildConfig(hash_slot_num=load_case(c)["hashSlotNum"],
                                                   index_num=load_case(c)["indexNum"],
                                                   window_ms=load_case(c)["windowMillis"], timezone="UTC"),
                      100_003, id=c.name) for c in GOLDEN_CASES]
CASES.append(pytest.param(EXTERNAL_STORE / "commitlog", BuildConfig(32, 128, 0, "UTC"), 1000, id="rocketmq-rust"))


@pytest.fixture(scope="module")
def core_builds(tmp_path_factory):
    """The in-process build of each CommitLog, made once."""
    done: dict[str, tuple[Path, dict]] = {}

    def get(commitlog: Path, config: BuildConfig) -> tuple[Path, dict]:
        key = f"{commitlog}|{config}"
        if key not in done:
            out = tmp_path_factory.mktemp("core")
            _, summary = build_index(commitlog, out, config)
            done[key] = (out, summary.as_dict())
        return done[key]
    return get


def _summary(s: dict) -> dict:
    return {k: v for k, v in s.items() if k != "wall_s"}


@pytest.mark.parametrize("plan", ["direct", "shuffle"])
@pytest.mark.parametrize("partitions", [1, 2, 7])
@pytest.mark.parametrize("commitlog, config, split", CASES)
def test_same_bytes_and_manifest_as_the_in_process_build(spark, core_builds, tmp_path, commitlog, config, split,
                                                         partitions, plan):
    core_out, core_summary = core_builds(commitlog, config)
    out = tmp_path / "out"
    stats: dict = {}
    _, summary = build_index_spark(commitlog, out, config, spark=spark, split_bytes=split,
                                   shuffle_partitions=partitions, stats=stats, shuffle=plan == "shuffle")
    assert stats["mode"] == plan
    if plan == "shuffle":
        assert stats["splits"] > len(list(commitlog.iterdir())), "every segment was split"
    else:
        assert stats["partitions"] == min(partitions, stats["ranges"]), "one task per share of the windows"
    assert same_build(core_out, out) == []
    assert _summary(summary.as_dict()) == _summary(core_summary)


@pytest.mark.parametrize("name", ["corrupt_then_valid_in_later_segment", "zero_totalsize_then_garbage",
                                  "offsets_beyond_2_pow_32", "torn_record_in_body", "valid_record_then_bad_magic"])
def test_scenarios_split_into_small_pieces(spark, core_builds, tmp_path, name):
    store = SCENARIOS[name].write(tmp_path / "store")
    config = BuildConfig(hash_slot_num=7, index_num=3, window_ms=0, timezone="UTC")
    core_out, core_summary = core_builds(store / "commitlog", config)
    _, summary = build_index_spark(store, tmp_path / "out", config, spark=spark, split_bytes=200, shuffle_partitions=2)
    assert same_build(core_out, tmp_path / "out") == []
    assert _summary(summary.as_dict()) == _summary(core_summary)


# Records whose PHYSICALOFFSET field is not their position (the cases of tests/unit/verify/test_build_verify_agree.py):
# record -> its field, an int or "@k" for record k's position (two messages then share one offset).
LYING = {
    "far ahead": {3: 10**6},  # everything after it in its window is below endPhyOffset
    "back to the start": {3: 0},
    "onto a later record": {3: "@5"},  # two messages, one field: still two messages
    "first record far ahead": {0: 10**6},
    "negative": {2: -7},
    "two moved": {1: "@6", 6: "@1"},
    "at a split start": {4: 10**6},  # with split_bytes 200, a split resynchronises just past it
}


def _lying_store(root: Path, moves: dict) -> tuple[Path, object]:
    recs = [replace(BASIC, queue_offset=i, store_timestamp_ms=1_700_000_000_000 + 1000 * i,
                    properties=props(("UNIQ_KEY", f"U{i}"), ("KEYS", f"k{i} j{i % 3}"))) for i in range(8)]
    where = lay_segment(recs, 8192).offsets
    for i, v in moves.items():
        recs[i] = replace(recs[i], phy_offset=where[int(v[1:])] if isinstance(v, str) else v)
    laid = lay_segment(recs, 8192)
    return write_segments(root, [laid]), laid


@pytest.mark.parametrize("plan", ["direct", "shuffle"])
@pytest.mark.parametrize("window", [0, 1000, 2000])
@pytest.mark.parametrize("case", sorted(LYING))
def test_a_record_whose_offset_field_lies_builds_as_in_process(spark, tmp_path, case, window, plan):
    """Issue 20, item 3: the broker's rules decide (spec §2-§5): such a record passes recovery's checks,
    ``buildIndex`` indexes its field and skips what falls below a file's endPhyOffset. The in-process
    build does that; Spark gives the same files, manifest and summary (it refused the log before)."""
    store, laid = _lying_store(tmp_path / "store", LYING[case])
    config = BuildConfig(101, 400, window, "UTC")
    _, core = build_index(store, tmp_path / "core", config)
    assert core.phy_mismatch is not None
    stats: dict = {}
    _, summary = build_index_spark(store, tmp_path / "out", config, spark=spark, split_bytes=200,
                                   shuffle_partitions=2, stats=stats, shuffle=plan == "shuffle")
    assert same_build(tmp_path / "core", tmp_path / "out") == []
    assert _summary(summary.as_dict()) == _summary(core.as_dict())
    if core.below_end_phy_offset_skipped:
        assert core.below_end_first_offset in laid.offsets


def test_a_second_build_of_the_same_output_is_refused(spark, tmp_path):
    commitlog = EXTERNAL_STORE / "commitlog"
    out = tmp_path / "out"
    with output_lock(out):
        with pytest.raises(StoreLockedError, match="another rocketidx build"):
            build_index_spark(commitlog, out, BuildConfig(32, 128, 0, "UTC"), spark=spark)
    assert not (out / "current").exists()


def test_rebuilding_gives_the_same_bytes_and_drops_the_old_version(spark, tmp_path):
    commitlog = GOLDEN_CASES[2] / "commitlog"
    config = BuildConfig(97, 50, 0, "UTC")
    first, second = tmp_path / "a", tmp_path / "b"
    build_index_spark(commitlog, first, config, spark=spark, split_bytes=100_003, shuffle_partitions=2)
    shutil.copytree(first, second, symlinks=True)
    old = (second / "current").resolve().name
    build_index_spark(commitlog, second, config, spark=spark, split_bytes=77_777, shuffle_partitions=3)
    assert same_build(first, second) == []
    assert old not in [p.name for p in second.glob(".v-*")]
    assert not list(second.glob(".v-*/_tasks"))


def test_time_and_offset_filters_index_exactly_the_messages_in_range(spark, tmp_path):
    case = GOLDEN_CASES[0]
    table, _ = core_read(case / "commitlog")
    ts = sorted(table["store_timestamp_ms"].to_pylist())
    t_lo, t_hi, lo = ts[300], ts[1800], 200_000
    manifest, summary = build_index_spark(case, tmp_path / "out", BuildConfig(97, 400, 0, "UTC"), spark=spark,
                                          split_bytes=100_003, from_offset=lo, from_time_ms=t_lo, to_time_ms=t_hi)
    assert manifest["filters"] == {"from_offset": lo, "from_time_ms": t_lo, "to_time_ms": t_hi}
    items = []
    for f in manifest["files"]:
        idx = IndexFile(tmp_path / "out" / "index" / f["name"], 97, 400)
        items += idx.items["phy_offset"][1:idx.header.index_count].tolist()
    entries = [e for b in table.to_batches() for e in extract_entries(b).to_pylist()]
    assert sorted(items) == sorted(e["phy_offset"] for e in entries
                                   if e["phy_offset"] >= lo and t_lo <= e["store_timestamp_ms"] < t_hi)
    assert summary.messages == sum(1 for r in table.to_pylist() if r["phy_offset"] >= lo
                                   and t_lo <= r["store_timestamp_ms"] < t_hi)


@pytest.mark.parametrize("steps, back_ms, plan", [(2, 70 * 60_000, "direct"), (40, 3 * 3_600_000, "shuffle")])
def test_a_clock_that_steps_back_gives_the_in_process_bytes(spark, tmp_path, steps, back_ms, plan):
    """A few steps back: the direct plan reroutes the strays; many: it gives way to the shuffle plan.
    150 items per file, so windows roll over into several files."""
    from rocketidx.sample.generate import GenConfig, generate_store
    store = tmp_path / "store"
    generate_store(store, GenConfig(messages=6000, segment_bytes=256 * 1024, body_bytes=200, span_ms=6 * 3_600_000,
                                    clock_steps=steps, clock_back_ms=back_ms, seed=5))
    config = BuildConfig(hash_slot_num=31, index_num=150, window_ms=3_600_000, timezone="UTC")
    _, core_summary = build_index(store, tmp_path / "core", config)
    stats: dict = {}
    _, summary = build_index_spark(store, tmp_path / "out", config, spark=spark, shuffle_partitions=7, stats=stats)
    assert stats["mode"] == plan
    if plan == "direct":
        assert stats["strays"] > 0 and stats["rerun_tasks"] > 0
    assert same_build(tmp_path / "core", tmp_path / "out") == []
    assert _summary(summary.as_dict()) == _summary(core_summary.as_dict())


def test_a_range_builds_the_same_in_process_and_on_spark(spark, tmp_path):
    from rocketidx.build.in_process import build_index_range
    case = GOLDEN_CASES[5]
    table, _ = core_read(case / "commitlog")
    ts = sorted(table["store_timestamp_ms"].to_pylist())
    bounds = dict(from_offset=5000 * 1024**2 + 300_000, from_time_ms=ts[200], to_time_ms=ts[2000])
    config = BuildConfig(53, 200, 433_000, "UTC")
    _, core = build_index_range(case, tmp_path / "core", config, **bounds)
    _, on_spark = build_index_spark(case, tmp_path / "spark", config, spark=spark, shuffle_partitions=3, **bounds)
    assert same_build(tmp_path / "core", tmp_path / "spark") == []
    assert _summary(on_spark.as_dict()) == _summary(core.as_dict()) and core.messages > 0


@pytest.mark.parametrize("partitions", [1, 2, 7])
def test_a_slice_read_through_the_time_index_gives_the_full_reads_bytes(spark, tmp_path, partitions):
    """The clock steps back 70 minutes in three places, so the slice's records lie in blocks far apart;
    on Spark the slice reads only those blocks (each task its windows) and builds what a full read does."""
    from rocketidx.build.in_process import build_index_range
    from rocketidx.sample.generate import GenConfig, generate_store
    from rocketidx.commitlog.timeindex import DIR_NAME
    store = tmp_path / "store"
    generate_store(store, GenConfig(messages=6000, segment_bytes=256 * 1024, body_bytes=200, span_ms=6 * 3_600_000,
                                    clock_steps=3, clock_back_ms=70 * 60_000, seed=5))
    config = BuildConfig(hash_slot_num=31, index_num=150, window_ms=1_800_000, timezone="UTC")
    build_index(store, tmp_path / "whole", config)
    lo, hi = 1_700_000_000_000 + 3_600_000, 1_700_000_000_000 + 3 * 3_600_000
    _, full = build_index_range(store, tmp_path / "core", config, from_time_ms=lo, to_time_ms=hi, time_index=None)
    stats: dict = {}
    _, sliced = build_index_spark(store, tmp_path / "out", config, spark=spark, shuffle_partitions=partitions,
                                  from_time_ms=lo, to_time_ms=hi, stats=stats,
                                  time_index=str(tmp_path / "whole" / DIR_NAME))
    # One task owns every window, so no strays; more tasks may own strays in over half the slice's bytes,
    # and then the direct plan rightly gives way to the shuffle plan (which reads everything).
    assert stats["mode"] == "direct" if partitions == 1 else stats["mode"] in ("direct", "shuffle")
    assert stats["time_index"].endswith("blocks") if stats["mode"] == "direct" else \
        stats["time_index"].startswith("not used: the direct plan gave way")
    assert same_build(tmp_path / "core", tmp_path / "out") == []
    strip = ("wall_s", "bytes_scanned", "time_index")
    assert {k: v for k, v in sliced.as_dict().items() if k not in strip} == \
        {k: v for k, v in full.as_dict().items() if k not in strip}
    if stats["mode"] == "direct":
        assert sliced.bytes_scanned < full.bytes_scanned


@pytest.mark.parametrize("plan", ["direct", "shuffle"])
@pytest.mark.parametrize("targets", [("index",), ("consumequeue",), ("index", "consumequeue")])
def test_the_executors_say_which_reader_ran(spark, tmp_path, plan, targets):
    from rocketidx.commitlog.native import reader_name
    case = GOLDEN_CASES[0]
    if plan == "shuffle" and targets == ("consumequeue",):
        pytest.skip("the queues have no shuffle plan")
    _, summary = build_index_spark(case / "commitlog", tmp_path / "out", BuildConfig(timezone="UTC", targets=targets),
                                   spark=spark, split_bytes=64 * 1024, shuffle=plan == "shuffle")
    assert summary.reader == reader_name()  # the executors run this environment: the kernel where it is built
