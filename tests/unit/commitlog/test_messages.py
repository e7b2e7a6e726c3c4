"""Every scenario of tests/support/scenarios.py decodes to its stated fields and index keys.

Three ways in (RangeReader over bytes, read_segment over a file, CommitLogReader over a store), each on
the numpy reference path and on the compiled kernel; entries through extract_entry_keys /
extract_entries and entries_from_records.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from scenarios import BAD, KNOWN_TEXT_BUGS, SCENARIOS, VALID, java_key_hash, java_properties
from rocketidx.commitlog.columns import MESSAGE_SCHEMA, parse_properties
from rocketidx.commitlog.entries import entries_from_records, extract_entries, extract_entry_keys
from rocketidx.commitlog.readers import CommitLogReader, RangeReader, read_segment
from rocketidx.commitlog.segments import Segment, SegmentRange, list_segments

ALL = VALID + BAD
# The same names, with a strict xfail on the scenarios whose decoded text the core gets wrong.
TEXT = [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_TEXT_BUGS[n]))
        if n in KNOWN_TEXT_BUGS else n for n in ALL]


def read_store(store: Path, native: bool) -> tuple[pa.Table, CommitLogReader]:
    reader = CommitLogReader(list_segments(store), native=native)
    return pa.Table.from_batches(list(reader), MESSAGE_SCHEMA), reader


def keys_per_row(table: pa.Table) -> list[tuple[str, ...]]:
    rows, _, keys = extract_entry_keys(table)
    out: list[list[str]] = [[] for _ in range(table.num_rows)]
    for r, k in zip(rows.tolist(), keys.to_pylist()):
        out[r].append(k)
    return [tuple(k) for k in out]


@pytest.mark.parametrize("name", TEXT)
def test_commitlog_reader_returns_every_valid_record_with_its_fields(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    table, _ = read_store(sc.write(tmp_path), reader_native)
    assert table.to_pylist() == sc.expected_rows()


@pytest.mark.parametrize("name", ALL)
def test_commitlog_reader_stops_at_the_stated_segment_offset_and_reason(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    _, reader = read_store(sc.write(tmp_path), reader_native)
    segment, offset, kind = sc.expected_stop()
    assert Path(reader.stop.path).name == segment
    assert reader.stop.segment_offset == offset
    assert reader.stop.kind == kind
    assert reader.stop.reason.startswith(sc.stop_reason), reader.stop.reason
    assert reader.stop.phy_offset == int(segment) + offset


@pytest.mark.parametrize("name", TEXT)
def test_range_reader_over_the_first_segment_gives_its_records(name, reader_native):
    sc = SCENARIOS[name]
    laid = sc.lay()[0]
    seg = Segment(f"/nowhere/{laid.name}", laid.base_offset, len(laid.data))
    reader = RangeReader(laid.data, SegmentRange(seg, 0, seg.size), native=reader_native)
    rows = [r for batch in reader for r in batch.to_pylist()]
    expected = [dict(r, segment=laid.name) for r in sc.expected_rows() if r["segment"] == laid.name]
    assert rows == expected
    assert reader.records == len(expected)


@pytest.mark.parametrize("name", TEXT)
def test_read_segment_of_a_file_gives_the_same_rows(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    store = sc.write(tmp_path)
    seg = list_segments(store)[0]
    table, stop = read_segment(seg, native=reader_native)
    assert table.to_pylist() == [r for r in sc.expected_rows() if r["segment"] == seg.name]
    assert stop.path == seg.path


@pytest.mark.parametrize("name", TEXT)
def test_small_batches_give_the_same_rows(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    reader = CommitLogReader(list_segments(sc.write(tmp_path)), batch_records=1, native=reader_native)
    batches = list(reader)
    assert all(b.num_rows == 1 for b in batches)
    table = pa.Table.from_batches(batches, MESSAGE_SCHEMA)  # one chunk per record
    assert table.to_pylist() == sc.expected_rows()
    assert keys_per_row(table) == sc.expected_index_keys()
    assert extract_entries(table).to_pylist() == extract_entries(table.combine_chunks()).to_pylist()


@pytest.mark.parametrize("name", TEXT)
def test_index_keys_are_uniq_key_then_each_non_empty_keys_piece(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    table, _ = read_store(sc.write(tmp_path), reader_native)
    assert keys_per_row(table) == sc.expected_index_keys()


@pytest.mark.parametrize("name", TEXT)
def test_entries_carry_offset_sequence_java_key_hash_and_store_time(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    table, _ = read_store(sc.write(tmp_path), reader_native)
    expected = []
    for row, keys in zip(sc.expected_rows(), sc.expected_index_keys()):
        for seq, key in enumerate(keys):
            expected.append({"phy_offset": row["phy_offset"], "entry_seq": seq, "key_hash": java_key_hash(key),
                             "store_timestamp_ms": row["store_timestamp_ms"]})
    assert extract_entries(table).to_pylist() == expected


@pytest.mark.parametrize("name", ALL)
def test_entries_from_records_equal_extract_entries(name, tmp_path, reader_native):
    """The build's path (records array -> entries) gives what the message columns give."""
    sc = SCENARIOS[name]
    reader = CommitLogReader(list_segments(sc.write(tmp_path)), native=reader_native)
    got = []
    for seg, buf, recs in reader.record_chunks():
        got += entries_from_records(buf, seg, recs, native=reader_native).to_pylist()
    table, _ = read_store(sc.write(tmp_path), False)
    assert got == extract_entries(table).to_pylist()


@pytest.mark.parametrize("name", ALL)
def test_parse_properties_matches_string2messageProperties(name, tmp_path):
    sc = SCENARIOS[name]
    table, _ = read_store(sc.write(tmp_path), False)
    maps = parse_properties(table["properties"].combine_chunks()).to_pylist()
    for got, text in zip(maps, table["properties"].to_pylist()):
        assert dict(got) == java_properties(text)


def test_every_scenario_of_the_brief_is_in_the_registry():
    required = {"ipv4_v1", "ipv6_born_host", "ipv6_store_host", "magic_v2_long_topic", "blank_tail",
                "rollback_tx", "prepared_tx", "commit_tx", "many_keys", "doubled_spaces",
                "leading_trailing_spaces", "empty_keys_value", "uniq_key_only",
                "duplicate_property_names_later_wins", "piece_without_separator",
                "value_contains_name_value_separator", "non_bmp_and_cjk_keys", "invalid_utf8_in_keys",
                "empty_body", "bad_magic", "bad_crc", "torn_record_in_body", "totalsize_overflow",
                "totalsize_mismatch_longer", "negative_topic_length_v1"}
    assert required <= set(SCENARIOS)


def test_rollback_message_is_decoded_but_makes_no_entry(tmp_path, reader_native):
    table, _ = read_store(SCENARIOS["rollback_tx"].write(tmp_path), reader_native)
    assert table.num_rows == 1 and table["sys_flag"][0].as_py() & 0xC == 0xC
    assert extract_entries(table).num_rows == 0


def test_ipv6_hosts_come_back_as_16_address_bytes_and_port(tmp_path, reader_native):
    table, _ = read_store(SCENARIOS["ipv6_both_hosts"].write(tmp_path), reader_native)
    row = table.to_pylist()[0]
    assert row["born_host"] == bytes.fromhex("20010db8000000000000000000000007")
    assert row["store_host"] == bytes.fromhex("20010db80000000000000000000000aa")
    assert row["sys_flag"] & 0x30 == 0x30


def test_magic_v2_topic_longer_than_127_bytes(tmp_path, reader_native):
    table, _ = read_store(SCENARIOS["magic_v2_long_topic"].write(tmp_path), reader_native)
    row = table.to_pylist()[0]
    assert row["magic_version"] == 2 and len(row["topic"]) == 141


def test_blank_record_ends_a_segment_and_reading_goes_on(tmp_path, reader_native):
    sc = SCENARIOS["blank_tail"]
    _, reader = read_store(sc.write(tmp_path), reader_native)
    laid = sc.lay()
    assert [s.kind for s in reader.stops] == ["blank", "end_of_data"]
    assert reader.stops[0].segment_offset == laid[0].end - 8  # the blank record's own position
    assert reader.segments_read == 2
