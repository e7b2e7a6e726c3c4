"""Splits stitched by ``resolve_stops`` read exactly what the broker's recovery reads (the core, no JVM).

Each split is read on its own by :func:`rocketidx.commitlog.readers.read_split`, as a Spark task does; the stops of all splits then decide which records
count. For every scenario of the shared registry (invalid records, zero tails, blanks, torn records) and
every golden case, at split sizes that put boundaries inside records, the stitched rows, the final stop,
the per-segment stops and the bytes read equal the core's sequential reader.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refdata import GOLDEN_CASES
from scenarios import BASIC, SCENARIOS, Rec, Scenario, Seg, lay_segment, props, write_segments
from splitread import core_read, split_read

from rocketidx.commitlog.segments import list_segments
from rocketidx.commitlog.splits import RangeInfo, SplitSpec, plan_splits, resolve_stops

SPLITS = [16, 61, 256, 1000, 4096]


def assert_same_as_core(store, **options):
    table, reader = core_read(store)
    got, resolved, rereads = split_read(store, **options)
    assert got.to_pylist() == table.to_pylist()
    assert resolved.stop == reader.stop.as_dict()
    assert list(resolved.stops) == [s.as_dict() for s in reader.stops]
    assert resolved.bytes_read == reader.bytes_read
    assert resolved.messages == reader.records
    return resolved, rereads


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_at_every_split_reads_like_the_broker(tmp_path, name, split):
    store = SCENARIOS[name].write(tmp_path / "store")
    assert_same_as_core(store, split_bytes=split)


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=[c.name for c in GOLDEN_CASES])
def test_golden_cases_split_inside_records_read_like_the_broker(case):
    for split in (4093, 65536):
        assert_same_as_core(case / "commitlog", split_bytes=split)


@settings(max_examples=30)
@given(name=st.sampled_from(sorted(SCENARIOS)), split=st.integers(8, 4200))
def test_any_split_size(tmp_path_factory, name, split):
    store = SCENARIOS[name].write(tmp_path_factory.mktemp("s"))
    assert_same_as_core(store, split_bytes=split)


def _records(n: int) -> list[Rec]:
    return [replace(BASIC, queue_offset=i, properties=props(("UNIQ_KEY", f"U{i}"), ("KEYS", f"k{i}")))
            for i in range(n)]


def test_a_record_the_resync_cannot_see_makes_the_segment_read_whole(tmp_path):
    """Record 3's PHYSICALOFFSET is not its position: recovery reads it (it does not check that field),
    but a split resynchronising there cannot recognise it and starts at record 4. The chains disagree,
    so that segment is read again as one split, and nothing is lost."""
    recs = _records(6)
    recs[3] = replace(recs[3], phy_offset=12345)
    laid = lay_segment(recs, 4096)
    store = write_segments(tmp_path / "store", [laid])
    resolved, rereads = assert_same_as_core(store, split_bytes=laid.offsets[3] - 5)
    assert rereads == 1
    assert resolved.phy_mismatch == ((str(store / "commitlog" / laid.name), laid.offsets[3]),)


def test_invalid_record_where_a_chain_crosses_into_the_next_split_is_seen(tmp_path):
    """The split whose last record runs into the next split judges the record it leads to."""
    recs = _records(6)
    recs[3] = replace(recs[3], magic=0x0BADBEEF)
    laid = lay_segment(recs, 4096)
    store = write_segments(tmp_path / "store", [laid])
    resolved, rereads = assert_same_as_core(store, split_bytes=laid.offsets[3] - 5)
    assert rereads == 0
    assert resolved.stop["segment_offset"] == laid.offsets[3]


def test_zero_tail_starting_in_the_next_split_is_the_end_of_data(tmp_path):
    laid = lay_segment(_records(5), 4096)
    store = write_segments(tmp_path / "store", [laid])
    resolved, _ = assert_same_as_core(store, split_bytes=laid.end - 3)
    assert resolved.stop == {"segment": laid.name, "segment_offset": laid.end, "phy_offset": laid.end,
                             "kind": "end_of_data", "reason": "end of data (zero TOTALSIZE, zero tail)"}


def test_offset_and_time_filters_keep_exactly_the_records_in_range(tmp_path):
    recs = [replace(r, store_timestamp_ms=1_700_000_000_000 + 1000 * i) for i, r in enumerate(_records(8))]
    laid = lay_segment(recs, 4096)
    store = write_segments(tmp_path / "store", [laid])
    table, _ = core_read(store)
    rows = table.to_pylist()
    lo, hi = laid.offsets[2] + 1, laid.offsets[6]  # from the middle of record 2: records 3..5
    got, _, _ = split_read(store, split_bytes=100, from_offset=lo, to_offset=hi)
    assert got.to_pylist() == [r for r in rows if lo <= r["phy_offset"] < hi]
    t_lo, t_hi = 1_700_000_001_000, 1_700_000_004_000
    got, _, _ = split_read(store, split_bytes=100, from_time_ms=t_lo, to_time_ms=t_hi)
    assert got.to_pylist() == [r for r in rows if t_lo <= r["store_timestamp_ms"] < t_hi]


def test_blank_record_ends_only_its_segment(tmp_path):
    s = Scenario("blank", (Seg(tuple(_records(3)), blank=True), Seg(tuple(_records(2)))))
    resolved, _ = assert_same_as_core(s.write(tmp_path / "store"), split_bytes=300)
    assert [x["kind"] for x in resolved.stops] == ["blank", "end_of_data"]


def test_resolve_stops_reports_a_split_that_finds_no_record_where_the_chain_continues():
    infos = [RangeInfo(0, "/s/0", 0, 4096, 0, 100, 0, 150, "range_end", "range ends", 1),
             RangeInfo(1, "/s/0", 0, 4096, 100, 200, None, 200, "range_end", "no record starts", 0),
             RangeInfo(2, "/s/0", 0, 4096, 200, 4096, 220, 400, "end_of_data", "end of data", 1)]
    resolved = resolve_stops(infos)
    assert [(b.expected, b.found) for b in resolved.chain_breaks] == [(150, None), (150, 220)]


def test_plan_covers_every_byte_once_and_clips_to_the_offset_range(tmp_path):
    store = Scenario("two", (Seg(tuple(_records(3))), Seg(tuple(_records(3))))).write(tmp_path / "s")
    segs = list_segments(str(store))
    parts = plan_splits(segs, SplitSpec(split_bytes=1000))
    assert [(p.segment.base_offset, p.start, p.end) for p in parts][:5] == [
        (0, 0, 1000), (0, 1000, 2000), (0, 2000, 3000), (0, 3000, 4000), (0, 4000, 4096)]
    assert [p.index for p in parts] == list(range(len(parts)))
    parts = plan_splits(segs, SplitSpec(split_bytes=1000, from_offset=4000, to_offset=5000, whole_segments=(4096,)))
    assert [(p.segment.base_offset, p.start, p.end) for p in parts] == [(0, 4000, 4096), (4096, 0, 904)]


def test_remote_uri_reads_through_pyarrow_fs_like_the_local_path(tmp_path):
    store = SCENARIOS["valid_record_then_bad_magic"].write(tmp_path / "store")
    local, _, _ = split_read(store, split_bytes=200)
    remote, resolved, _ = split_read(f"file://{store}", split_bytes=200)
    assert remote.drop(["segment"]).to_pylist() == local.drop(["segment"]).to_pylist()
    assert resolved.stop["kind"] == "corrupt"
