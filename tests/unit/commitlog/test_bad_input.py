"""Bad input: each case is a typed error naming the file (and, for records, a stop naming the segment
and byte offset), through the library and through the CLI (exit 2, one line on stderr, no traceback).
Nothing after an invalid record is ever returned or indexed."""
from __future__ import annotations

import os
import struct
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from scenarios import BAD, BASIC, GOOD_AFTER, SCENARIOS, Scenario, Seg, lay_segment, write_segments
from rocketidx import cli
from rocketidx.build.in_process import build_index
from rocketidx.commitlog.columns import MESSAGE_SCHEMA
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import BuildConfig
from rocketidx.errors import CorruptIndexError, RocketIdxError, StoreLayoutError
from rocketidx.query.lookup import open_index

SMALL = BuildConfig(hash_slot_num=11, index_num=8, window_ms=0, timezone="UTC")


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_naming(err: str, path: str | Path) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0], err
    assert "Traceback" not in err


# --- records ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", BAD)
def test_invalid_record_is_a_corrupt_or_final_stop_at_its_segment_and_offset(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    reader = CommitLogReader(list_segments(sc.write(tmp_path)), native=reader_native)
    list(reader)
    segment, offset, kind = sc.expected_stop()
    assert reader.stop.kind == kind
    assert reader.stop.final
    assert Path(reader.stop.path).name == segment
    assert reader.stop.segment_offset == offset
    assert reader.stop.reason.startswith(sc.stop_reason)


@pytest.mark.parametrize("name", BAD)
def test_valid_records_after_an_invalid_one_are_never_returned(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    reader = CommitLogReader(list_segments(sc.write(tmp_path)), native=reader_native)
    rows = pa.Table.from_batches(list(reader), MESSAGE_SCHEMA).to_pylist()
    _, offset, _ = sc.expected_stop()
    stop_phy = reader.stop.phy_offset
    assert all(r["phy_offset"] < stop_phy for r in rows)
    assert all(r["queue_offset"] != GOOD_AFTER.queue_offset for r in rows)
    assert len(rows) == len(sc.expected_rows())


@pytest.mark.parametrize("name", BAD)
def test_build_indexes_only_what_precedes_the_invalid_record_and_reports_the_stop(name, tmp_path, reader_native):
    sc = SCENARIOS[name]
    store = sc.write(tmp_path / "store")
    manifest, summary = build_index(store, tmp_path / "out", SMALL, native=reader_native)
    segment, offset, kind = sc.expected_stop()
    assert manifest["stop"]["segment"] == segment
    assert manifest["stop"]["segment_offset"] == offset
    assert manifest["stop"]["kind"] == kind
    assert manifest["stop"]["reason"].startswith(sc.stop_reason)
    assert summary.messages == len(sc.expected_rows())
    assert summary.entries == sum(len(k) for k in sc.expected_index_keys())
    for f in manifest["files"]:
        assert f["end_phy_offset"] < manifest["stop"]["phy_offset"]


def test_corrupt_record_in_a_later_segment_stops_everything_after_it(tmp_path, reader_native):
    sc = Scenario("x", (
        Seg((BASIC,), blank=True),
        Seg((BASIC, replace(BASIC, body_crc=1, expect=None), GOOD_AFTER), blank=True),
        Seg((replace(BASIC, queue_offset=300, expect=None),)),
    ))
    reader = CommitLogReader(list_segments(sc.write(tmp_path)), native=reader_native)
    rows = pa.Table.from_batches(list(reader), MESSAGE_SCHEMA).to_pylist()
    assert [r["phy_offset"] for r in rows] == [0, 4096]
    assert reader.stop.kind == "corrupt"
    assert Path(reader.stop.path).name == f"{4096:020d}"
    assert reader.stop.segment_offset == BASIC.true_length()
    assert reader.segments_read == 2


def test_no_crc_setting_reads_a_record_whose_body_crc_is_wrong(tmp_path, reader_native):
    sc = SCENARIOS["bad_crc"]
    reader = CommitLogReader(list_segments(sc.write(tmp_path)), check_crc=False, native=reader_native)
    rows = pa.Table.from_batches(list(reader), MESSAGE_SCHEMA).to_pylist()
    assert len(rows) == 3
    assert reader.stop.kind == "end_of_data"


def test_cli_build_reports_the_stop_with_segment_and_offset(tmp_path, capsys):
    sc = SCENARIOS["bad_magic"]
    store = sc.write(tmp_path / "store")
    rc, out, err = run_cli(capsys, "build", "--commitlog", store, "--out", tmp_path / "out",
                           "--hash-slots", 11, "--index-num", 8, "--window", "0", "--timezone", "UTC")
    segment, offset, _ = sc.expected_stop()
    assert rc != 2, err  # it ran; whether a reported stop should exit 1 is an open question
    assert "Traceback" not in err
    assert segment in out and str(offset) in out and "unknown magic" in out


@pytest.mark.parametrize("native", [False, True], ids=["numpy", "native"])
def test_negative_properties_length_is_reported_with_the_negative_computed_length(native, tmp_path):
    """PROPERTIESLENGTH -2000: the length from the fields is TOTALSIZE - 2000, and the stop says so."""
    bad = replace(BASIC, properties=b"", expect=None)
    laid = lay_segment([BASIC, bad])
    data = bytearray(laid.data)
    total = bad.true_length()
    struct.pack_into(">h", data, BASIC.true_length() + total - 2, -2000)  # the record's last 2 bytes
    store = write_segments(tmp_path, [replace(laid, data=bytes(data))])
    reader = CommitLogReader(list_segments(store), native=native)
    list(reader)
    assert reader.stop.kind == "corrupt"
    assert reader.stop.segment_offset == BASIC.true_length()
    assert reader.stop.reason == (f"TOTALSIZE {total} differs from the length computed from the field "
                                  f"lengths ({total - 2000})")


# --- store layout ----------------------------------------------------------------------------------

def _store(tmp_path: Path, sizes_and_bases: list[tuple[int, int]]) -> Path:
    d = tmp_path / "store" / "commitlog"
    d.mkdir(parents=True)
    for base, size in sizes_and_bases:
        laid = lay_segment([BASIC], size=size, base_offset=base)
        (d / laid.name).write_bytes(laid.data)
    return tmp_path / "store"


def _layout_cases(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """name -> (path given to the reader, the file the error must name)."""
    cases = {}
    empty = tmp_path / "empty"
    (empty / "commitlog").mkdir(parents=True)
    cases["empty_directory"] = (empty, empty / "commitlog")

    stray = _store(tmp_path / "stray", [(0, 4096)])
    (stray / "commitlog" / "notes.txt").write_text("hello")
    cases["non_segment_file_in_commitlog"] = (stray, stray / "commitlog" / "notes.txt")

    unequal = _store(tmp_path / "unequal", [(0, 4096), (4096, 4096), (8192, 2048)])
    cases["segments_of_unequal_size"] = (unequal, unequal / "commitlog" / f"{8192:020d}")

    gap = _store(tmp_path / "gap", [(0, 4096), (8192, 4096)])
    cases["gap_in_segment_offsets"] = (gap, gap / "commitlog" / f"{8192:020d}")

    missing = tmp_path / "does-not-exist"
    cases["nonexistent_path"] = (missing, missing)

    afile = tmp_path / "a-file"
    afile.write_bytes(b"x" * 10)
    cases["file_instead_of_directory"] = (afile, afile)

    zero = tmp_path / "zero" / "commitlog"
    zero.mkdir(parents=True)
    (zero / f"{0:020d}").write_bytes(b"")
    cases["empty_segment_file"] = (zero.parent, zero / f"{0:020d}")
    return cases


LAYOUT_CASES = ["empty_directory", "non_segment_file_in_commitlog", "segments_of_unequal_size",
                "gap_in_segment_offsets", "nonexistent_path", "file_instead_of_directory", "empty_segment_file"]


@pytest.mark.parametrize("case", LAYOUT_CASES)
def test_bad_store_layout_is_a_store_layout_error_naming_the_file(case, tmp_path):
    given, culprit = _layout_cases(tmp_path)[case]
    with pytest.raises(StoreLayoutError) as e:
        list_segments(given)
    assert e.value.path == str(culprit)
    assert str(culprit) in str(e.value)
    assert e.value.reason


@pytest.mark.parametrize("case", LAYOUT_CASES)
def test_bad_store_layout_fails_the_build_before_any_output(case, tmp_path):
    given, culprit = _layout_cases(tmp_path)[case]
    with pytest.raises(StoreLayoutError) as e:
        build_index(given, tmp_path / "out", SMALL)
    assert str(culprit) in str(e.value)
    assert not (tmp_path / "out" / "_SUCCESS").exists()


@pytest.mark.parametrize("case", LAYOUT_CASES)
def test_cli_build_on_bad_layout_exits_2_with_one_line_naming_the_file(case, tmp_path, capsys):
    given, culprit = _layout_cases(tmp_path)[case]
    rc, out, err = run_cli(capsys, "build", "--commitlog", given, "--out", tmp_path / "out",
                           "--hash-slots", 11, "--index-num", 8)
    assert rc == 2
    assert_one_line_naming(err, culprit)


def test_directories_inside_commitlog_are_ignored(tmp_path):
    store = _store(tmp_path, [(0, 4096)])
    (store / "commitlog" / "subdir").mkdir()
    assert [s.name for s in list_segments(store)] == [f"{0:020d}"]


def test_commitlog_directory_itself_is_accepted(tmp_path):
    store = _store(tmp_path, [(0, 4096), (4096, 4096)])
    assert list_segments(store) == list_segments(store / "commitlog")


# --- index files -----------------------------------------------------------------------------------

def _built_index(tmp_path: Path) -> Path:
    store = SCENARIOS["many_keys"].write(tmp_path / "store")
    build_index(store, tmp_path / "out", SMALL)
    return tmp_path / "out"


def test_index_file_of_the_wrong_size_is_a_corrupt_index_error_at_byte_0(tmp_path):
    out = _built_index(tmp_path)
    with pytest.raises(CorruptIndexError) as e:
        open_index(out, 12, 8)  # the manifest says 11 slots
    f = out / "index" / os.listdir(out / "index")[0]
    # Named by the committed version's own path (the reader pins OUT/current once): the same file.
    assert os.path.realpath(e.value.path) == os.path.realpath(f) and "/.v-" in e.value.path
    assert e.value.offset == 0
    assert e.value.path in str(e.value)


def test_index_file_with_index_count_out_of_range_is_a_corrupt_index_error_at_its_offset(tmp_path):
    out = _built_index(tmp_path)
    f = out / "index" / os.listdir(out / "index")[0]
    data = bytearray(f.read_bytes())
    struct.pack_into(">i", data, 36, 9)  # indexCount lives at byte 36: 8+8+8+8+4; index_num is 8
    real = f.resolve()
    real.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError) as e:
        open_index(out)
    assert e.value.offset == 36
    assert str(f.name) in str(e.value)


def test_index_file_with_hash_slot_count_out_of_range_is_a_corrupt_index_error_at_its_offset(tmp_path):
    out = _built_index(tmp_path)
    f = out / "index" / os.listdir(out / "index")[0]
    data = bytearray(f.read_bytes())
    struct.pack_into(">i", data, 32, -1)
    f.resolve().write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError) as e:
        open_index(out)
    assert e.value.offset == 32


def test_cli_query_on_a_wrong_size_index_exits_2_with_one_line(tmp_path, capsys):
    out = _built_index(tmp_path)
    rc, _, err = run_cli(capsys, "query", "--index", out, "--hash-slots", 12, "--topic", "TopicA", "--key", "a")
    assert rc == 2  # built with 11 slots: the files are 4 bytes short for 12
    f = out / "index" / os.listdir(out / "index")[0]
    assert_one_line_naming(err, f.name)


def test_cli_query_on_a_missing_directory_exits_2(tmp_path, capsys):
    rc, _, err = run_cli(capsys, "query", "--index", tmp_path / "nope", "--topic", "T", "--key", "k")
    assert rc == 2
    assert_one_line_naming(err, tmp_path / "nope")


def test_every_error_class_is_a_rocketidx_error_and_pickles():
    import pickle

    from rocketidx.errors import ConfigError, CorruptRecordError, StoreLockedError
    for e in (ConfigError("window", "x", "bad"), StoreLayoutError("/p", "bad"),
              CorruptRecordError("/p", 12, "bad"), CorruptIndexError("/p", 36, "bad"),
              StoreLockedError("/p", "held")):
        assert isinstance(e, RocketIdxError)
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)
    assert str(CorruptRecordError("/p/f", 12, "why")) == "/p/f @ byte 12: why"


# --- values the CRC does not cover ------------------------------------------------------------------

FAR_TIMESTAMPS = [253_402_300_800_000, -62_135_596_800_001, 2**62]  # year 10000, year 0, far future


@pytest.mark.parametrize("store_ts", FAR_TIMESTAMPS)
def test_store_timestamp_outside_years_1_to_9999_is_named_or_reported_not_a_value_error(store_ts, tmp_path):
    sc = Scenario("far", (Seg((replace(BASIC, store_timestamp_ms=store_ts),)),))
    try:
        build_index(sc.write(tmp_path / "store"), tmp_path / "out", SMALL)
    except RocketIdxError:
        pass


def test_cli_build_with_a_far_store_timestamp_prints_one_line_not_a_traceback(tmp_path, capsys):
    sc = Scenario("far", (Seg((replace(BASIC, store_timestamp_ms=FAR_TIMESTAMPS[0]),)),))
    store = sc.write(tmp_path / "store")
    rc, _, err = run_cli(capsys, "build", "--commitlog", store, "--out", tmp_path / "out",
                         "--hash-slots", 11, "--index-num", 8, "--timezone", "UTC")
    assert "Traceback" not in err
    assert rc == 0 or len(err.strip().splitlines()) == 1


def test_store_timestamps_before_1970_are_indexed(tmp_path):
    sc = Scenario("old", (Seg((replace(BASIC, store_timestamp_ms=-86_400_000 * 365),
                               replace(BASIC, store_timestamp_ms=-1, queue_offset=8))),))
    manifest, summary = build_index(sc.write(tmp_path / "store"), tmp_path / "out",
                                    BuildConfig(hash_slot_num=11, index_num=8, window_ms=3_600_000,
                                                timezone="UTC"))
    assert summary.entries == 6
    assert [f["name"] for f in manifest["files"]] == ["19690101000000000", "19691231235959999"]


# --- bad settings -------------------------------------------------------------------------------------

# Since issue 31 items 13 and 14 the error names the flag the user gave, not the setting behind it.
@pytest.mark.parametrize("args,option", [
    (["--index-num", "1"], "--index-num"),
    (["--hash-slots", "0"], "--hash-slots"),
    (["--hash-slots", "5000000", "--index-num", "200000000"], "--index-num"),
    (["--timezone", "Mars/Olympus_Mons"], "timezone"),
])
def test_cli_build_with_a_bad_setting_exits_2_naming_the_option(args, option, tmp_path, capsys):
    store = SCENARIOS["ipv4_v1"].write(tmp_path / "store")
    try:
        rc, _, err = run_cli(capsys, "build", "--commitlog", store, "--out", tmp_path / "out", *args)
    except SystemExit as e:  # refused by the argument parser, in one line
        rc, err = e.code, capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and option in err and "Traceback" not in err


def test_cli_query_with_a_malformed_queries_file_exits_2_naming_the_line(tmp_path, capsys):
    out = _built_index(tmp_path)
    q = tmp_path / "q.jsonl"
    q.write_text('{"topic": "TopicA", "key": "a"}\n{not json\n')
    rc, stdout, err = run_cli(capsys, "query", "--index", out, "--queries", q)
    assert rc == 2
    assert_one_line_naming(err, q)
    assert "line 2" in err


def test_a_chain_cycle_in_a_corrupt_index_file_does_not_hang_a_query(tmp_path):
    import signal

    import numpy as np

    from rocketidx.index.reader import IndexFile
    from rocketidx.index.writer import WindowWriter
    w = WindowWriter(tmp_path, 0, 0, 7, 10)
    w.add(np.array([1, 2, 3]), np.array([3, 10, 17]), np.array([1_700_000_000_000] * 3))  # one slot: 3
    [info] = w.close()
    p = tmp_path / info.name
    data = bytearray(p.read_bytes())
    struct.pack_into(">i", data, 40 + 4 * 7 + 20 * 1 + 16, 3)  # item 1's prev_index: 0 -> 3
    p.write_bytes(bytes(data))

    def hang(*_):
        raise TimeoutError("query still walking the chain after 2 s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(2)
    try:
        out: list[int] = []
        try:
            IndexFile(p, 7, 10).select_phy_offsets(out, 24, 64, 0, 2**63 - 1)  # 24 % 7 == 3, no match
        except CorruptIndexError as e:
            assert e.path == str(p)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
