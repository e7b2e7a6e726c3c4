"""The sparse time index: a build keeps it, a time slice reads only its blocks, and it never changes a result.

Every slice is built twice, with the index and without (a full read filtered by time), and the outputs
must be equal byte for byte, manifest and summary included (only the bytes scanned may differ). The
index must also give way, not give a wrong answer, when the log changed under it: a segment the broker
appended to is read from where the index ends; a rewritten segment or a damaged index file is not used.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from refdata import GOLDEN_CASES, load_case
from splitread import core_read, same_build

from rocketidx.build.in_process import build_index
from rocketidx.build.in_process import build_index_range
from rocketidx.cli import main
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.commitlog.records import scan_records
from rocketidx.commitlog.segments import list_segments, open_segment
from rocketidx.commitlog.timeindex import DIR_NAME, BlockCollector, load, plan_slice, scan_segments
from rocketidx.config import BuildConfig
import rocketidx.layout as L

HOUR = 3_600_000
START = 1_700_000_000_000
CONFIG = BuildConfig(hash_slot_num=31, index_num=150, window_ms=HOUR, timezone="UTC")


def _store(path, **kw):
    generate_store(path, GenConfig(messages=6000, segment_bytes=256 * 1024, body_bytes=200, span_ms=6 * HOUR,
                                   start_ms=START, seed=5, **kw))
    return path


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return _store(tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    """Store times step back 70 minutes in three places: records of a slice sit outside its bytes."""
    return _store(tmp_path_factory.mktemp("skewed"), clock_steps=3, clock_back_ms=70 * 60_000)


def _summary(s):
    return {k: v for k, v in s.as_dict().items() if k not in ("wall_s", "bytes_scanned", "time_index")}


def _slice_both_ways(store, tmp_path, lo, hi, config=CONFIG, index_dir=None):
    """Build [lo, hi) without a time index and with one (made by a whole build unless given)."""
    _, plain = build_index_range(store, tmp_path / "full-read", config, from_time_ms=lo, to_time_ms=hi,
                                 time_index=None)
    if index_dir is None:
        build_index(store, tmp_path / "whole", config)
        index_dir = tmp_path / "whole" / DIR_NAME
    _, sliced = build_index_range(store, tmp_path / "sliced", config, from_time_ms=lo, to_time_ms=hi,
                                  time_index=str(index_dir))
    assert same_build(tmp_path / "full-read", tmp_path / "sliced") == []
    assert _summary(sliced) == _summary(plain)
    return plain, sliced


@pytest.mark.parametrize("lo, hi", [(START + HOUR, START + 2 * HOUR), (START - HOUR, START + 600_000),
                                    (START + 5 * HOUR + 1, None), (None, START + HOUR // 2),
                                    (START + 7 * HOUR, START + 8 * HOUR)])
@pytest.mark.parametrize("store", ["plain", "skewed"])
def test_a_slice_reads_its_blocks_and_builds_the_same_bytes(request, tmp_path, store, lo, hi):
    plain, sliced = _slice_both_ways(request.getfixturevalue(store), tmp_path, lo, hi)
    assert sliced.time_index and sliced.time_index.split()[1] == "of"
    assert sliced.bytes_scanned < plain.bytes_scanned == plain.bytes_read
    if lo == START + HOUR and store == "plain":  # one hour of six: about a sixth, plus a block each side
        assert sliced.bytes_scanned < plain.bytes_read / 6 + 2 * 1024**2


def test_a_skewed_slice_finds_records_outside_its_bytes(skewed, tmp_path):
    """The records stamped 70 minutes early lie in later blocks: the slice must read those blocks too."""
    table, _ = core_read(skewed / "commitlog")
    ts = np.array(table["store_timestamp_ms"].to_pylist())
    lo, hi = START + HOUR, START + 2 * HOUR
    pos = np.array(table["phy_offset"].to_pylist())
    in_slice = pos[(ts >= lo) & (ts < hi)]
    late = in_slice[in_slice > np.median(in_slice) + 200_000]
    assert len(late) > 0, "the fixture should put some of the slice's records far from the rest"
    _, sliced = _slice_both_ways(skewed, tmp_path, lo, hi)
    assert sliced.messages == len(in_slice)


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=lambda c: c.name)
def test_golden_slices_are_byte_identical(case, tmp_path):
    meta = load_case(case)
    config = BuildConfig(meta["hashSlotNum"], meta["indexNum"], meta["windowMillis"], "UTC")
    table, _ = core_read(case / "commitlog")
    ts = sorted(table["store_timestamp_ms"].to_pylist())
    index_dir = tmp_path / "tix"
    assert main(["timeindex", "--commitlog", str(case / "commitlog"), "--out", str(index_dir),
                 "--block-bytes", "4k"]) == 0
    _slice_both_ways(case / "commitlog", tmp_path, ts[len(ts) // 3], ts[2 * len(ts) // 3], config, index_dir)


def test_a_segment_appended_to_since_is_read_from_where_the_index_ends(plain, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(plain, store)
    last = list_segments(store / "commitlog")[-1]
    raw = bytearray(open(last.path, "rb").read())
    table, _ = core_read(store / "commitlog")
    cut = int(np.array(table["phy_offset"].to_pylist())[-200]) - last.base_offset  # 200 records from the end
    with open(last.path, "r+b") as f:  # the broker had not written them yet when the index was made
        f.seek(cut)
        f.write(bytes(len(raw) - cut))
    build_index(store, tmp_path / "whole", CONFIG)
    tix = load(tmp_path / "whole" / DIR_NAME, last)
    assert (tix.stop_offset, tix.stop_kind) == (cut, "end_of_data")
    with open(last.path, "r+b") as f:
        f.write(raw)
    plain_s, sliced = _slice_both_ways(store, tmp_path, START + 5 * HOUR, None,
                                       index_dir=tmp_path / "whole" / DIR_NAME)
    assert sliced.stop == plain_s.stop and sliced.stop["segment_offset"] > cut
    assert "blocks" in sliced.time_index


def test_a_rewritten_segment_or_a_damaged_index_is_not_used(plain, tmp_path):
    build_index(plain, tmp_path / "whole", CONFIG)
    tdir = tmp_path / "whole" / DIR_NAME
    segments = list_segments(plain / "commitlog")
    first = tdir / (segments[0].name + ".tix")
    raw = first.read_bytes()
    first.write_bytes(raw[:-8] + bytes(8))  # entries no longer match their CRC
    sliced, why = plan_slice(segments, tdir, START, START + HOUR, True)
    assert sliced is None and "CRC" in why and segments[0].name in why
    first.write_bytes(raw)
    assert plan_slice(segments, tdir, START, START + HOUR, False)[1].endswith("made with check_crc=True")
    store = tmp_path / "store"
    shutil.copytree(plain, store)
    seg = list_segments(store / "commitlog")[2]
    with open(seg.path, "r+b") as f:  # another log at the same path: its first bytes differ
        f.seek(100)
        f.write(b"\x01")
    assert plan_slice(list_segments(store / "commitlog"), tdir, START, START + HOUR, True)[1] == \
        f"{seg.name}: the segment's bytes changed"
    _, sliced_s = _slice_both_ways(store, tmp_path, START, START + HOUR, index_dir=tdir)
    assert sliced_s.time_index.startswith("not used")


def test_a_log_that_stops_at_a_corrupt_record_stops_there_in_a_slice(plain, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(plain, store)
    seg = list_segments(store / "commitlog")[3]
    recs = next(scan_records(open_segment(seg), seg, 0, seg.size, check_crc=False))
    with open(seg.path, "r+b") as f:  # a body byte of a record mid-segment: its CRC fails
        f.seek(int(recs[len(recs) // 2, L.REC_BODY_POS]))
        f.write(b"\xff\xfe")
    plain_s, sliced = _slice_both_ways(store, tmp_path, START + 4 * HOUR, START + 5 * HOUR)
    assert plain_s.stop["kind"] == "corrupt" and plain_s.messages == 0
    assert sliced.bytes_scanned == 0


def test_the_collector_merges_blocks_seen_twice_and_out_of_order():
    seg = list_segments(GOLDEN_CASES[0] / "commitlog")[0]
    recs = np.zeros((6, L.REC_COLS), np.int64)
    recs[:, L.REC_POS] = [0, 100, 1100, 1200, 2500, 2600]
    recs[:, L.REC_PHY] = recs[:, L.REC_POS] + seg.base_offset
    recs[:, L.REC_STORE_TS] = [50, 10, 70, 60, 5, 9]
    c = BlockCollector(1000)
    c.add(seg, recs[3:])
    c.add(seg, recs[:4])
    assert c.merged(seg.base_offset).tolist() == [[0, 0, 10, 50], [1, 1100, 60, 70], [2, 2500, 5, 9]]
    assert seg.base_offset not in c.mismatch


def test_the_command_writes_and_checks_and_refuses_a_broker_index_dir(plain, tmp_path, capsys):
    out = tmp_path / "tix"
    assert main(["timeindex", "--commitlog", str(plain), "--out", str(out), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["segments"] == len(list_segments(plain / "commitlog")) and written["block_bytes"] == 1024**2
    assert main(["timeindex", "--commitlog", str(plain), "--out", str(out), "--check"]) == 0
    capsys.readouterr()
    idx = scan_segments(list_segments(plain / "commitlog"), block_bytes=4096)[1]
    (out / (idx.segment + ".tix")).write_bytes(idx.to_bytes())  # another block size: checked at its own
    idx = scan_segments(list_segments(plain / "commitlog"))[2]
    idx.entries = idx.entries.copy()
    idx.entries["max_ts"][0] -= 1  # a well-formed file whose blocks say something the log does not
    (out / (idx.segment + ".tix")).write_bytes(idx.to_bytes())
    (out / (list_segments(plain / "commitlog")[0].name + ".tix")).unlink()
    assert main(["timeindex", "--commitlog", str(plain), "--out", str(out), "--check", "--json"]) == 1
    statuses = [r["status"] for r in json.loads(capsys.readouterr().out)["segments"]]
    assert statuses[:3] == ["missing", "ok", "stale"] and set(statuses[3:]) == {"ok"}
    assert main(["timeindex", "--commitlog", str(plain), "--out", str(plain / "index")]) == 2
    assert "store/index" in capsys.readouterr().err


def test_a_build_keeps_the_index_and_the_cli_slice_uses_it(plain, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["build", "--commitlog", str(plain), "--out", str(out), "--hash-slots", "31", "--index-num", "150",
            "--timezone", "UTC"]
    assert main(args) == 0
    assert len(list((out / DIR_NAME).glob("*.tix"))) == len(list_segments(plain / "commitlog"))
    capsys.readouterr()
    # A slice goes to an output of its own and reads the whole build's time index.
    sliced = [a if a != str(out) else str(tmp_path / "slice") for a in args] + ["--time-index", str(out / DIR_NAME)]
    assert main(sliced + ["--from-time", str(START + HOUR), "--to-time", str(START + 2 * HOUR), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["time_index"].endswith("blocks") and s["bytes_scanned"] < s["bytes_read"] / 3
    # Another range over it replaces it only when told to.
    again = sliced[:-2] + ["--from-time", str(START + HOUR), "--time-index", "none", "--json"]
    assert main(again) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(again + ["--overwrite"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["time_index"] is None and s["bytes_scanned"] == s["bytes_read"]


def test_a_whole_build_over_a_damaged_index_file_rewrites_it(plain, tmp_path):
    out = tmp_path / "out"
    build_index(plain, out, CONFIG)
    seg = list_segments(plain / "commitlog")[0]
    tix = out / DIR_NAME / (seg.name + ".tix")
    tix.write_bytes(b"garbage")
    build_index(plain, out, CONFIG)  # the index is kept on the side: its damage never fails a build
    assert load(out / DIR_NAME, seg).stop_offset > 0
    tix.write_bytes(b"garbage")
    build_index_range(plain, out, CONFIG, from_offset=seg.base_offset)  # the direct plan's path too
    assert load(out / DIR_NAME, seg).stop_offset > 0
