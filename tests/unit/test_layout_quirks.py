"""Each RocketMQ quirk listed in rocketidx/layout.py's docstring, pinned by a small test that reads the
written bytes with struct (offsets written out here, not taken from layout.py); plus sparse files and
broker-style file names."""
from __future__ import annotations

import os
import struct
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios import SCENARIOS, java_hash, string_with_hash
from rocketidx.build.in_process import build_index
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import BuildConfig
from rocketidx.index.lookup import query_offsets
from rocketidx.index.reader import IndexFile
from rocketidx.index.windows import assign_file_names, render_name
from rocketidx.index.writer import WindowWriter
import rocketidx.layout as L

T = 1_700_000_000_000


def write(tmp_path: Path, entries, hash_slot_num=7, index_num=5):
    """entries: (key_hash, phy, ts). Returns [(bytes, FileInfo)] in seq order."""
    w = WindowWriter(tmp_path, 0, 0, hash_slot_num, index_num)
    if entries:
        w.add(np.array([e[1] for e in entries]), np.array([e[0] for e in entries]),
              np.array([e[2] for e in entries]))
    infos = w.close()
    return [(Path(tmp_path, i.name).read_bytes(), i) for i in infos]


def header(data: bytes) -> dict:
    b, e, bp, ep, hsc, ic = struct.unpack_from(">qqqqii", data, 0)
    return dict(begin_timestamp=b, end_timestamp=e, begin_phy_offset=bp, end_phy_offset=ep,
                hash_slot_count=hsc, index_count=ic)


def slot(data: bytes, i: int) -> int:
    return struct.unpack_from(">i", data, 40 + 4 * i)[0]


def item(data: bytes, hash_slot_num: int, i: int) -> tuple[int, int, int, int]:
    """(key_hash, phy_offset, time_diff_s, prev_index) of item i."""
    return struct.unpack_from(">iqii", data, 40 + 4 * hash_slot_num + 20 * i)


def test_layout_declares_the_sizes_and_offsets_rocketmq_uses():
    assert L.index_file_size(5_000_000, 20_000_000) == 420_000_040
    assert L.index_file_size(7, 5) == 40 + 28 + 100
    assert [L.INDEX_HEADER.fields[f][1] for f in L.INDEX_HEADER.names] == [0, 8, 16, 24, 32, 36]
    assert [L.INDEX_ITEM.fields[f][1] for f in L.INDEX_ITEM.names] == [0, 4, 12, 16]
    assert L.RECORD_PREFIX.fields["phy_offset"][1] == 28 and L.RECORD_PREFIX.fields["sys_flag"][1] == 36
    assert (L.MAGIC_V1, L.MAGIC_V2, L.MAGIC_BLANK) == (0xDAA320A7, 0xDAA320AB, 0xCBD43194)
    assert L.MIN_RECORD_SIZE == 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2


# --- item 0 unused, indexCount starts at 1, indexNum - 1 entries a file -------------------------------

def test_item_0_is_never_written_and_index_count_starts_at_1(tmp_path):
    [(data, info)] = write(tmp_path, [(3, 1000, T)])
    assert item(data, 7, 0) == (0, 0, 0, 0)
    assert data[40 + 28:40 + 28 + 20] == bytes(20)
    assert item(data, 7, 1) == (3, 1000, 0, 0)
    assert header(data)["index_count"] == 2
    assert info.entries == 1


def test_a_file_holds_index_num_minus_1_entries_then_rolls_over(tmp_path):
    entries = [(i, 100 * i, T + i) for i in range(1, 10)]  # 9 entries, index_num 5: 4 + 4 + 1
    files = write(tmp_path, entries, index_num=5)
    assert [header(d)["index_count"] for d, _ in files] == [5, 5, 2]
    assert [i.entries for _, i in files] == [4, 4, 1]
    assert [i.seq for _, i in files] == [0, 1, 2]


def test_an_empty_window_writes_no_file_and_a_full_file_no_empty_successor(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert write(tmp_path / "a", []) == []
    assert os.listdir(tmp_path / "a") == []
    files = write(tmp_path / "b", [(i, i, T) for i in range(1, 5)], index_num=5)  # exactly full
    assert len(files) == 1 and header(files[0][0])["index_count"] == 5


# --- slot value 0 = empty -------------------------------------------------------------------------------

def test_slot_value_0_means_empty_and_hash_slot_count_counts_first_uses(tmp_path):
    # key hashes 3, 10 share slot 3 (7 slots); 5 has its own
    [(data, _)] = write(tmp_path, [(3, 10, T), (10, 20, T), (5, 30, T)], hash_slot_num=7, index_num=10)
    assert [slot(data, i) for i in range(7)] == [0, 0, 0, 2, 0, 3, 0]
    assert item(data, 7, 2)[3] == 1  # item 2 links back to item 1 of the same slot
    assert item(data, 7, 1)[3] == 0 and item(data, 7, 3)[3] == 0  # 0 ends the chain
    assert header(data)["hash_slot_count"] == 2


def _patched_index(tmp_path: Path, slot_value: int) -> list[IndexFile]:
    [(data, info)] = write(tmp_path, [(3, 10, T), (10, 20, T)], hash_slot_num=7, index_num=10)
    buf = bytearray(data)
    struct.pack_into(">i", buf, 40 + 4 * 3, slot_value)
    p = Path(tmp_path, info.name)
    p.write_bytes(bytes(buf))
    return [IndexFile(p, 7, 10)]


@pytest.mark.parametrize("slot_value", [0, -1, 4, 9])  # index_count is 3
def test_a_slot_value_out_of_1_to_index_count_is_read_as_empty(tmp_path, slot_value):
    files = _patched_index(tmp_path, slot_value)
    assert files[0].header.index_count == 3
    out: list[int] = []
    files[0].select_phy_offsets(out, 3, 64, 0, 2**63 - 1)
    assert out == []


# --- time diff: no begin -> 0, negative -> 0, capped at 2^31 - 1 ------------------------------------------

def test_first_entry_has_time_diff_0_and_sets_begin_after_the_diff(tmp_path):
    [(data, _)] = write(tmp_path, [(1, 10, T + 5_500), (2, 20, T + 9_400)])
    assert item(data, 7, 1)[2] == 0
    assert item(data, 7, 2)[2] == 3  # (9400 - 5500) / 1000, truncated
    h = header(data)
    assert (h["begin_timestamp"], h["end_timestamp"]) == (T + 5_500, T + 9_400)
    assert (h["begin_phy_offset"], h["end_phy_offset"]) == (10, 20)


def test_time_diff_is_0_while_the_begin_timestamp_is_not_positive(tmp_path):
    [(data, _)] = write(tmp_path, [(1, 10, 0), (2, 20, 50_000), (3, 30, 90_000)])
    assert [item(data, 7, i)[2] for i in (1, 2, 3)] == [0, 0, 0]  # begin stays 0: every diff is 0
    (tmp_path / "neg").mkdir()
    [(data, _)] = write(tmp_path / "neg", [(1, 10, -5_000), (2, 20, 50_000)])
    assert item(data, 7, 2)[2] == 0


def test_negative_time_diff_becomes_0(tmp_path):
    [(data, _)] = write(tmp_path, [(1, 10, T), (2, 20, T - 1), (3, 30, T - 8_000), (4, 40, T + 2_000)])
    assert [item(data, 7, i)[2] for i in (1, 2, 3, 4)] == [0, 0, 0, 2]


def test_time_diff_is_capped_at_integer_max_value(tmp_path):
    far = T + (2**31 + 10) * 1000
    [(data, _)] = write(tmp_path, [(1, 10, T), (2, 20, T + (2**31 - 1) * 1000 + 999), (3, 30, far)])
    assert [item(data, 7, i)[2] for i in (2, 3)] == [2**31 - 1, 2**31 - 1]


# --- MIN_VALUE hash -> 0 ------------------------------------------------------------------------------

def test_key_hash_of_integer_min_value_is_stored_as_0(tmp_path):
    """A message whose topic#key hashes to Integer.MIN_VALUE: its item's key hash is 0, in slot 0."""
    from dataclasses import replace

    from scenarios import BASIC, Expect, Scenario, Seg, props
    suffix = string_with_hash("T#", -2**31)[2:]  # like "polygenelubricants", but with the topic in front
    assert java_hash("T#" + suffix) == -2**31 == java_hash("polygenelubricants")
    sc = Scenario("min", (Seg((replace(BASIC, topic=b"T", properties=props(("KEYS", suffix)),
                                       expect=Expect("T", keys=suffix, index_keys=("T#" + suffix,))),)),))
    store = sc.write(tmp_path / "store")
    manifest, _ = build_index(store, tmp_path / "out", BuildConfig(hash_slot_num=7, index_num=5, window_ms=0,
                                                                   timezone="UTC"))
    data = (tmp_path / "out" / "index" / manifest["files"][0]["name"]).read_bytes()
    assert item(data, 7, 1)[0] == 0
    assert slot(data, 0) == 1


# --- rolled file's seeded header ----------------------------------------------------------------------

def test_rolled_file_first_time_diff_is_measured_from_the_full_files_end(tmp_path):
    entries = [(1, 100, T), (2, 200, T + 4_000), (3, 300, T + 9_700)]  # index_num 3: 2 entries a file
    (d0, i0), (d1, i1) = write(tmp_path, entries, index_num=3)
    assert (i1.created_with_end_phy_offset, i1.created_with_end_timestamp) == (200, T + 4_000)
    assert item(d1, 7, 1)[2] == 5  # (T+9700 - (T+4000)) / 1000: from the previous file's end, not 0
    h = header(d1)
    assert (h["begin_timestamp"], h["begin_phy_offset"]) == (T + 9_700, 300)  # then reset to its own
    assert (i0.created_with_end_phy_offset, i0.created_with_end_timestamp) == (0, 0)


def test_rolled_file_seeded_from_a_full_file_with_time_going_back_clamps_to_0(tmp_path):
    entries = [(1, 100, T), (2, 200, T + 4_000), (3, 300, T + 1_000)]
    _, (d1, _) = write(tmp_path, entries, index_num=3)
    assert item(d1, 7, 1)[2] == 0


def test_message_below_the_current_files_end_offset_is_skipped(tmp_path):
    w = WindowWriter(tmp_path, 0, 0, 7, 10)
    w.add(np.array([500, 400, 500, 600]), np.array([1, 2, 3, 4]), np.array([T, T, T, T]))
    [info] = w.close()
    data = Path(tmp_path, info.name).read_bytes()
    assert w.skipped_below_end == 1
    assert [item(data, 7, i)[1] for i in (1, 2, 3)] == [500, 500, 600]


# --- CRC & 0x7FFFFFFF ---------------------------------------------------------------------------------

def test_body_crc_is_crc32_masked_to_31_bits(tmp_path, reader_native):
    ok = CommitLogReader(list_segments(SCENARIOS["body_crc_with_bit_31"].write(tmp_path / "a")), native=reader_native)
    assert sum(b.num_rows for b in ok) == 1 and ok.stop.kind == "end_of_data"
    bad = CommitLogReader(list_segments(SCENARIOS["crc_not_masked"].write(tmp_path / "b")), native=reader_native)
    list(bad)
    assert bad.stop.kind == "corrupt" and "CRC" in bad.stop.reason


# --- sparse files -------------------------------------------------------------------------------------

def test_a_file_with_few_entries_takes_far_less_disk_than_its_size(tmp_path):
    w = WindowWriter(tmp_path, 0, 0, 1_000_000, 4_000_000)
    w.add(np.array([1, 2, 3]), np.array([5, 999_999, 123_456]), np.array([T, T, T]))
    [info] = w.close()
    st = os.stat(Path(tmp_path, info.name))
    assert st.st_size == 40 + 4 * 1_000_000 + 20 * 4_000_000
    if st.st_blocks * 512 >= st.st_size:
        pytest.skip("this file system does not keep holes")
    assert st.st_blocks * 512 < 1_000_000  # a few 4 KiB blocks, not 84 MB


def test_a_built_file_is_sparse_and_queries_still_answer(tmp_path):
    store = SCENARIOS["many_keys"].write(tmp_path / "store")
    manifest, _ = build_index(store, tmp_path / "out", BuildConfig(hash_slot_num=500_000, index_num=2_000_000,
                                                                   window_ms=0, timezone="UTC"))
    f = tmp_path / "out" / "index" / manifest["files"][0]["name"]
    st = os.stat(f)
    assert st.st_size == 40 + 4 * 500_000 + 20 * 2_000_000
    if st.st_blocks * 512 >= st.st_size:
        pytest.skip("this file system does not keep holes")
    assert st.st_blocks * 512 < st.st_size // 50
    files = [IndexFile(f, 500_000, 2_000_000)]
    assert query_offsets(files, "TopicA", "a") == [0, 0]


# --- file names -----------------------------------------------------------------------------------------

UTC = timezone.utc


def test_file_name_is_yyyymmddhhmmsssss_of_the_first_entry_in_the_zone():
    assert render_name(T, UTC) == "20231114221320000"
    assert render_name(T + 123, UTC) == "20231114221320123"
    assert render_name(T + 123, ZoneInfo("Asia/Shanghai")) == "20231115061320123"
    assert render_name(999, UTC) == "19700101000000999"


def test_file_names_strictly_increase_and_equal_times_are_bumped_by_1_ms():
    names = assign_file_names([T, T, T, T + 1, T + 5_000], UTC)
    assert names == ["20231114221320000", "20231114221320001", "20231114221320002", "20231114221320003",
                     "20231114221325000"]


def test_a_file_starting_earlier_than_its_predecessor_is_named_1_ms_after_it():
    names = assign_file_names([T + 10_000, T + 2_000, T + 20_000], UTC)
    assert names == ["20231114221330000", "20231114221330001", "20231114221340000"]


def test_names_stay_strictly_increasing_across_the_dst_fall_back_in_berlin():
    berlin = ZoneInfo("Europe/Berlin")
    # 2023-10-29: 03:00 CEST falls back to 02:00 CET. 00:30 UTC is 02:30 CEST; 01:10 UTC is 02:10 CET.
    before = int(datetime(2023, 10, 29, 0, 30, tzinfo=UTC).timestamp() * 1000)
    after = int(datetime(2023, 10, 29, 1, 10, tzinfo=UTC).timestamp() * 1000)
    later = int(datetime(2023, 10, 29, 1, 45, tzinfo=UTC).timestamp() * 1000)
    assert render_name(after, berlin) < render_name(before, berlin)  # the wall clock went back
    names = assign_file_names([before, before + 1, after, after + 60_000, later], berlin)
    assert all(a < b for a, b in zip(names, names[1:])), names
    assert names[0] == "20231029023000000"
    assert all(len(n) == 17 and n.isdigit() for n in names)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/Sao_Paulo", "Australia/Lord_Howe"])
def test_names_strictly_increase_over_a_year_of_hourly_files(zone):
    tz = UTC if zone == "UTC" else ZoneInfo(zone)
    start = int(datetime(2023, 1, 1, tzinfo=UTC).timestamp() * 1000)
    ts = [start + h * 3_600_000 + (h * 7919) % 3_600_000 for h in range(0, 24 * 366, 3)]
    names = assign_file_names(ts, tz)
    assert all(a < b for a, b in zip(names, names[1:]))


_ZONES = ["UTC", "Europe/Berlin", "Australia/Lord_Howe", "America/St_Johns", "Asia/Kolkata"]
_DST_DAYS = [int(datetime(2023, 10, 29, tzinfo=UTC).timestamp() * 1000),   # Berlin falls back
             int(datetime(2023, 4, 1, 14, tzinfo=UTC).timestamp() * 1000),  # Lord Howe: back 30 min
             int(datetime(2023, 11, 5, 3, tzinfo=UTC).timestamp() * 1000)]  # St John's falls back


@settings(max_examples=150)
@given(zone=st.sampled_from(_ZONES), start=st.sampled_from(_DST_DAYS),
       steps=st.lists(st.one_of(st.integers(-5_000, 900_000), st.just(0), st.just(1)), min_size=1, max_size=40))
def test_names_strictly_increase_for_any_first_timestamps_around_dst_changes(zone, start, steps):
    tz = UTC if zone == "UTC" else ZoneInfo(zone)
    ts, t = [], start
    for s in steps:
        t += s
        ts.append(t)
    names = assign_file_names(ts, tz)
    assert len(names) == len(ts)
    assert all(len(n) == 17 and n.isdigit() for n in names)
    assert all(a < b for a, b in zip(names, names[1:])), names
    assert names[0] == render_name(ts[0], tz)
