"""verify_index_spark gives verify_index's report: clean golden outputs, and every kind of damage.

Each case runs the core's :func:`verify_index` and the Spark version on the same opened files and asserts
the two reports are equal as a whole (problems in order with file, byte offset, kind and detail; counts;
file summaries; entries checked and expected; covered range), with the CommitLog cut into splits that
end inside records. The damage cases are those of tests/unit/verify/test_verify.py (its fixture and helpers),
plus listing caps, a subset of files with open ends, items pointing at a message that makes no entry,
and an item past an invalid record, which only the broker-recovery view of the splits leaves out.
"""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

import unit.verify.test_verify as core_cases
from refdata import GOLDEN, golden_params, load_case
from unit.verify.test_verify import G3, ITEMS, SLOTS, config_for, item_at, kinds_at

from rocketidx.build.in_process import build_index
from rocketidx.commitlog.readers import CommitLogReader, read_segment
from rocketidx.commitlog.segments import list_segments
from rocketidx.spark.verify import verify_index_spark
from rocketidx.verify.core import open_for_verify, verify_index
from rocketidx.verify.report import MAX_LISTED_PER_KIND, VerifyReport

pytestmark = pytest.mark.spark

damaged = core_cases.damaged  # the fixture: a copy of g3's reference files and a function poking bytes
SPLIT = 50_003  # golden segments are 256 KiB or 1 MiB: several splits each, boundaries inside records


def verify_both(spark, index_dir, commitlog=None, slots=SLOTS, items=ITEMS, window=False, files=None, **kw):
    """Both reports for the same files; asserts they are equal and returns the Spark one."""
    pre = VerifyReport()
    opened, manifest = open_for_verify(index_dir, slots, items, pre)
    if window and manifest:
        kw.update(window_ms=manifest.window_ms, window_ids=manifest.window_ids)
    opened = opened if files is None else [opened[i] for i in files]
    core = verify_index(opened, commitlog, **kw)
    got = verify_index_spark(opened, commitlog, spark=spark, split_bytes=SPLIT, **kw)
    assert got.as_dict() == core.as_dict()
    return got


def messages_of(commitlog: Path):
    """(phy_offset, sys_flag, uniq_key, keys) of every message, as the broker's recovery reads them."""
    reader = CommitLogReader(list_segments(commitlog))
    return [row for b in reader for row in zip(*(b.column(c).to_pylist()
                                                 for c in ("phy_offset", "sys_flag", "uniq_key", "keys")))]


# --- clean -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", golden_params())
def test_golden_build_output_and_reference_files_verify_clean(spark, case, tmp_path):
    build_index(case / "commitlog", tmp_path / "out", config_for(case))
    c = load_case(case)
    r = verify_both(spark, tmp_path / "out", case / "commitlog", c["hashSlotNum"], c["indexNum"], window=True)
    assert r.clean, r.problems[:5]
    assert r.entries_checked == r.expected_entries == json.loads(
        (case / "expected" / "manifest.json").read_text())["index"]["entries"]
    r = verify_both(spark, case / "expected" / "index", case / "commitlog", c["hashSlotNum"], c["indexNum"])
    assert r.clean, r.problems[:5]


def test_structure_only_without_a_commitlog(spark):
    r = verify_both(spark, G3 / "expected" / "index")
    assert r.clean and r.covered_range is None and r.expected_entries is None
    assert r.entries_checked == sum(f.entries for f in r.files) > 0
    paths = sorted(str(p) for p in (G3 / "expected" / "index").iterdir())
    by_path = verify_index_spark(paths, spark=spark, hash_slot_num=SLOTS, index_num=ITEMS)
    assert by_path.as_dict() == r.as_dict()
    # Paths without sizes: those their directory tells (open_index_dir's rule; g3 has full files), as
    # the CLI's directory gets them, not the broker defaults.
    assert verify_index_spark(paths, spark=spark).as_dict() == r.as_dict()


# --- the damage cases of test_verify.py --------------------------------------------------------------

def test_wrong_file_size_leaves_the_other_files_checked(spark, damaged):
    d, files, _ = damaged
    with open(files[4], "ab") as f:
        f.write(b"\0")
    r = verify_both(spark, d, G3 / "commitlog")
    assert files[4].name not in {f.name for f in r.files}
    assert r.counts["missing"] == ITEMS - 1  # its entries are nowhere else


def test_index_count_out_of_range(spark, damaged):
    d, files, poke = damaged
    path = poke(2, 36, ">i", ITEMS + 5)
    r = verify_both(spark, d, G3 / "commitlog")
    assert kinds_at(r, path)["header"] == [36]
    assert r.counts["missing"] == ITEMS - 1  # its items are not read: every entry of it is missing


def test_slot_value_out_of_range(spark, damaged):
    d, files, poke = damaged
    path = poke(3, 40 + 4 * 10, ">i", 999)
    assert 40 + 4 * 10 in kinds_at(verify_both(spark, d, G3 / "commitlog"), path)["slot-range"]


def test_chain_going_forward(spark, damaged):
    d, files, poke = damaged
    path = poke(1, item_at(5, 16), ">i", 40)
    assert kinds_at(verify_both(spark, d, G3 / "commitlog"), path)["chain-order"] == [item_at(5, 16)]


def test_item_linked_to_an_item_of_another_slot(spark, damaged):
    d, files, poke = damaged
    kh = struct.unpack_from(">i", files[0].read_bytes(), item_at(10))[0]
    path = poke(0, item_at(10), ">i", kh + 1)
    r = verify_both(spark, d, G3 / "commitlog")
    k = kinds_at(r, path)
    assert {"chain-slot", "slot-head"} & set(k)
    assert k["extra"] == [item_at(10)] and k["missing"] == [0]


def test_hash_slot_count_mismatch(spark, damaged):
    d, files, poke = damaged
    count = struct.unpack_from(">i", files[5].read_bytes(), 32)[0]
    path = poke(5, 32, ">i", count + 1)
    assert kinds_at(verify_both(spark, d, G3 / "commitlog"), path) == {"header": [32]}


def test_non_zero_item_zero_and_bytes_past_index_count(spark, damaged):
    d, files, poke = damaged
    last = len(files) - 1
    count = struct.unpack_from(">i", files[last].read_bytes(), 36)[0]
    poke(last, item_at(0, 4), ">q", 7)
    path = poke(last, item_at(count) + 3, ">B", 1)
    k = kinds_at(verify_both(spark, d, G3 / "commitlog"), path)
    assert k["item0"] == [item_at(0)] and k["tail"] == [item_at(count) + 3]


def test_header_offsets(spark, damaged):
    d, files, poke = damaged
    path = poke(6, 16, ">q", 1)
    assert kinds_at(verify_both(spark, d, G3 / "commitlog"), path) == {"header": [16]}


def test_unreachable_item(spark, damaged):
    d, files, poke = damaged
    path, head = core_cases.orphan_a_chain_head(files, poke)
    k = kinds_at(verify_both(spark, d, G3 / "commitlog"), path)
    assert k["unreachable"] == [item_at(head)] and "header" in k


def test_offset_that_is_not_a_message_and_a_time_diff_that_disagrees(spark, damaged):
    d, files, poke = damaged
    poke(8, item_at(3, 4), ">q", 12345)
    path = poke(9, item_at(4, 12), ">i", 99999)
    r = verify_both(spark, d, G3 / "commitlog")
    assert kinds_at(r, files[8])["not-a-message"] == [item_at(3)]
    assert kinds_at(r, path)["time-diff"] == [item_at(4, 12)]


def test_missing_file_leaves_entries_missing(spark, damaged):
    d, files, _ = damaged
    files[10].unlink()
    r = verify_both(spark, d, G3 / "commitlog")
    assert r.counts["missing"] == ITEMS - 1
    last = [p.detail for p in r.problems if p.kind == "missing"][-1]
    assert last == f"... and {ITEMS - 1 - MAX_LISTED_PER_KIND} more"


def test_entries_in_the_wrong_window_are_reported(spark, tmp_path):
    case = GOLDEN / "g1-basic-hourly"
    build_index(case / "commitlog", tmp_path / "out", config_for(case))
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    manifest["files"][0]["window_id"] += 1
    (tmp_path / "out" / "_manifest.json").unlink()
    (tmp_path / "out" / "_manifest.json").write_text(json.dumps(manifest))
    r = verify_both(spark, tmp_path / "out", case / "commitlog", 97, 400, window=True)
    assert r.counts["window"] == manifest["files"][0]["entries"] > MAX_LISTED_PER_KIND


# --- beyond test_verify.py ------------------------------------------------------------------------------

def test_listing_caps_and_two_time_diff_groups_in_one_file(spark, damaged):
    """25 wrong diffs found by the content check and 2 negative ones found by the structure check: two
    groups of one kind in one file, each listed and counted on its own, as the core's two add calls."""
    d, files, poke = damaged
    for i in range(2, 27):
        poke(3, item_at(i, 12), ">i", 40_000 + i)
    path = poke(3, item_at(30, 12), ">i", -1)
    poke(3, item_at(31, 12), ">i", -2)
    r = verify_both(spark, d, G3 / "commitlog")
    details = [p.detail for p in r.problems if Path(p.file) == path and p.kind == "time-diff"]
    assert r.counts["time-diff"] == 25 + 2 + 2  # the negative ones also disagree with the store time
    assert details[:2] == ["negative time diff (queries stop at it)"] * 2
    assert details[-1] == f"... and {27 - MAX_LISTED_PER_KIND} more"


def test_many_extra_items_in_one_file(spark, damaged):
    d, files, poke = damaged
    raw = files[2].read_bytes()
    for i in range(1, 31):
        poke(2, item_at(i, 4), ">q", struct.unpack_from(">q", raw, item_at(31, 4))[0])
    r = verify_both(spark, d, G3 / "commitlog")
    assert r.counts["extra"] > MAX_LISTED_PER_KIND and r.counts["missing"] > MAX_LISTED_PER_KIND


@pytest.mark.parametrize("open_start, open_end", [(False, False), (True, False), (False, True), (True, True)])
def test_a_run_of_files_with_open_ends(spark, open_start, open_end):
    """Files 3..5 of g3: messages whose keys straddle the neighbouring files are missing unless exempt."""
    verify_both(spark, G3 / "expected" / "index", G3 / "commitlog", files=[3, 4, 5],
                open_start=open_start, open_end=open_end)


def test_item_pointing_at_a_message_that_makes_no_entry(spark, tmp_path):
    """A rollback or a message with neither UNIQ_KEY nor KEYS is a message (not 'not-a-message') but no
    entry of it can be indexed: the item is extra. Exercises the messages pass."""
    case = GOLDEN / "g1-basic-hourly"
    entryless = [phy for phy, flag, uniq, keys in messages_of(case / "commitlog")
                 if (flag & 0xC) == 0xC or (uniq is None and not (keys or "").strip())]
    assert entryless
    d = tmp_path / "index"
    shutil.copytree(case / "expected" / "index", d)
    first = sorted(d.iterdir())[0]
    raw = bytearray(first.read_bytes())
    at = 40 + 4 * 97 + 20 * 5 + 4
    struct.pack_into(">q", raw, at, entryless[0])
    first.chmod(0o644)
    first.write_bytes(bytes(raw))
    r = verify_both(spark, d, case / "commitlog", 97, 400)
    assert r.counts["extra"] >= 1 and "not-a-message" not in r.counts


def test_item_past_an_invalid_record_is_not_a_message(spark, tmp_path):
    """g5 stops at a record with a bad CRC; valid records lie after it. An item pointing at one in a later
    split is not a message to the broker's recovery, but that split reads it: only the stops pass
    across splits leaves it out."""
    case = GOLDEN / "g5-corrupt-crc-last-segment"
    segs = list_segments(case / "commitlog")
    reader = CommitLogReader(segs)
    for _ in reader:
        pass
    assert reader.stop.kind == "corrupt"
    seg = next(s for s in segs if s.base_offset == reader.stop.base_offset)
    next_split = (reader.stop.segment_offset // SPLIT + 1) * SPLIT  # the covered range starts before seg
    after, _ = read_segment(seg, start=next_split)
    assert after.num_rows, "no valid record in a split after the corrupt one"
    beyond = after.column("phy_offset")[0].as_py()
    d = tmp_path / "index"
    shutil.copytree(case / "expected" / "index", d)
    last = sorted(d.iterdir())[-1]
    raw = bytearray(last.read_bytes())
    count = struct.unpack_from(">i", raw, 36)[0]
    struct.pack_into(">q", raw, 40 + 4 * 97 + 20 * (count - 1) + 4, beyond)
    last.chmod(0o644)
    last.write_bytes(bytes(raw))
    r = verify_both(spark, d, case / "commitlog", 97, 1000)
    assert r.covered_range[1] == beyond
    assert kinds_at(r, last)["not-a-message"] == [40 + 4 * 97 + 20 * (count - 1)]


# --- the command line --------------------------------------------------------------------------------

def test_cli_verify_on_spark_prints_the_in_process_report(spark, damaged, capsys):
    from rocketidx.cli import main
    index_dir, _, poke = damaged
    poke(8, item_at(3, 4), ">q", 12345)  # an offset that starts no message
    args = ["verify", "--index", str(index_dir), "--hash-slots", str(SLOTS), "--index-num", str(ITEMS),
            "--commitlog", str(G3 / "commitlog"), "--json"]
    assert main(args) == 1
    core = json.loads(capsys.readouterr().out)
    assert main(args + ["--spark", "--split-bytes", str(SPLIT)]) == 1
    assert json.loads(capsys.readouterr().out) == core and core["counts"]["not-a-message"] == 1
    assert spark.sparkContext._jsc is not None  # the test's session was joined, not stopped
    assert main(args + ["--in-process", "--master", "local[1]"]) == 2
    assert "--master needs Spark" in capsys.readouterr().err
    assert main(args + ["--in-process", "--spark"]) == 2
    assert "exclude each other" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["far ahead", "onto a later record"])
def test_misplaced_offsets_on_spark_give_the_core_report(spark, tmp_path, case):
    """Issue 12, point 3: a bare reading finds the misplaced field itself and judges in one held pass."""
    from unit.verify.test_build_verify_agree import MOVES, _store
    from rocketidx.config import BuildConfig
    store = _store(tmp_path / "store", MOVES[case])
    build_index(store, tmp_path / "out", BuildConfig(hash_slot_num=101, index_num=400, window_ms=1000))
    got = verify_both(spark, tmp_path / "out", store, slots=None, items=None, window=True)
    assert got.clean and got.expected_entries == got.entries_checked > 0


def test_time_slice_on_spark_expects_only_the_slice(spark, tmp_path):
    from rocketidx.config import BuildConfig
    from rocketidx.build.in_process import build_index_range
    from rocketidx.sample.generate import GenConfig, generate_store
    from rocketidx.verify.core import BuildRead
    t0 = 1_700_000_000_000
    generate_store(tmp_path / "store", GenConfig(messages=4000, segment_bytes=128 * 1024, span_ms=6 * 3_600_000,
                                                 clock_steps=2, clock_back_ms=90 * 60_000, seed=5))
    build_index_range(tmp_path / "store", tmp_path / "out", BuildConfig(hash_slot_num=101, index_num=400,
                                                                        window_ms=3_600_000),
                      from_time_ms=t0 + 2 * 3_600_000, to_time_ms=t0 + 4 * 3_600_000)
    _, manifest = open_for_verify(tmp_path / "out", None, None, VerifyReport())
    got = verify_both(spark, tmp_path / "out", tmp_path / "store", slots=None, items=None, window=True,
                      rules=BuildRead.of(manifest))
    assert got.clean and got.expected_entries == got.entries_checked > 0


def test_header_times_one_millisecond_off(spark, damaged):
    d, files, poke = damaged
    raw = files[6].read_bytes()
    path = poke(6, 8, ">q", struct.unpack_from(">q", raw, 8)[0] ^ 1)
    assert kinds_at(verify_both(spark, d, G3 / "commitlog"), path) == {"header-time": [8]}


def test_another_log_is_said_and_every_file_counts_its_problems_on_spark(spark, tmp_path):
    """Issue 20 item 6: an index checked against a CommitLog it was not built from (another gen seed) gives
    the core's report on Spark: the one line saying so, and a per-file problems column that counts every
    problem of the file (the content ones included), not 0."""
    from rocketidx.config import BuildConfig
    from rocketidx.sample.generate import GenConfig, generate_store
    shape = dict(messages=3000, segment_bytes=256 * 1024, span_ms=3 * 3_600_000)
    generate_store(tmp_path / "A", GenConfig(seed=1, **shape))
    generate_store(tmp_path / "B", GenConfig(seed=2, **shape))
    build_index(tmp_path / "A", tmp_path / "out", BuildConfig(hash_slot_num=4096, index_num=8192))
    _, manifest = open_for_verify(tmp_path / "out", None, None, VerifyReport())
    from rocketidx.verify.core import BuildRead
    rules = BuildRead.of(manifest)
    other = verify_both(spark, tmp_path / "out", tmp_path / "B", slots=None, items=None, window=True, rules=rules)
    assert other.log_mismatch.startswith("the index was not built from this CommitLog")
    assert all(f.problems for f in other.files)
    assert sum(f.problems for f in other.files) == sum(other.counts.values())
    same = verify_both(spark, tmp_path / "out", tmp_path / "A", slots=None, items=None, window=True, rules=rules)
    assert same.clean and same.log_mismatch is None


@pytest.mark.parametrize("lost", ["newest", "oldest", "all"])
def test_files_lost_at_either_end_are_the_same_uncovered_stretches(spark, damaged, lost):
    """Issue 31 item 1: the log outside the files' offsets is judged the same on both engines."""
    d, files, _ = damaged
    for f in {"newest": files[-2:], "oldest": files[:1], "all": files}[lost]:
        f.unlink()
    if lost == "all":
        core = verify_index([], G3 / "commitlog")  # no file left: the structure step has nothing to open
        got = verify_index_spark([], G3 / "commitlog", spark=spark, split_bytes=SPLIT)
        assert got.as_dict() == core.as_dict()
        return
    r = verify_both(spark, d, G3 / "commitlog")
    assert r.counts["uncovered"] > 0 and r.gaps and not r.clean


def test_items_below_the_logs_first_offset_are_counted_not_judged_on_spark(spark, tmp_path):
    """Retention removed the log's first segment; the files keep entries of its messages (as a broker's do, and an
    incremental one-sequence output): counted in expired_items on both engines, not judged; damage above the
    log's first offset is still found."""
    case = GOLDEN / "g3-single-window-tiny-files"
    log = tmp_path / "commitlog"
    shutil.copytree(case / "commitlog", log)
    first = sorted(log.iterdir())[0]
    first.unlink()
    index = tmp_path / "index"
    shutil.copytree(case / "expected" / "index", index)
    r = verify_both(spark, index, log)
    assert r.clean and r.expired_items > 0, (r.problems[:5], r.expired_items)
    newest = sorted(index.iterdir())[-1]
    data = bytearray(newest.read_bytes())
    count = struct.unpack_from(">i", data, 36)[0]
    at = item_at(count - 1, 4)
    struct.pack_into(">q", data, at, struct.unpack_from(">q", data, at)[0] + 1)
    newest.write_bytes(bytes(data))
    r = verify_both(spark, index, log)
    assert not r.clean and r.expired_items > 0
