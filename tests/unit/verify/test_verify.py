"""rocketidx verify: clean on every golden case; each kind of damage detected with file and byte offset."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from refdata import GOLDEN, golden_params, load_case
from rocketidx.build.in_process import build_index
from rocketidx.cli import main
from rocketidx.config import BuildConfig
from rocketidx.verify.core import open_for_verify, verify_index
from rocketidx.verify.report import VerifyReport

G3 = GOLDEN / "g3-single-window-tiny-files"  # 97 slots, 50 items, many full files
SLOTS, ITEMS = 97, 50
ITEMS_AT = 40 + 4 * SLOTS


def item_at(i: int, field: int = 0) -> int:
    return ITEMS_AT + 20 * i + field


def config_for(case: Path) -> BuildConfig:
    c = load_case(case)
    return BuildConfig(hash_slot_num=c["hashSlotNum"], index_num=c["indexNum"], window_ms=c["windowMillis"],
                       timezone="UTC")


def run_verify(index_dir, commitlog=None, slots=SLOTS, items=ITEMS, window=False):
    pre = VerifyReport()
    files, manifest = open_for_verify(index_dir, slots, items, pre)
    kw = {}
    if window and manifest:
        kw = dict(window_ms=manifest.window_ms, window_ids=manifest.window_ids)
    r = verify_index(files, commitlog, **kw)
    r.counts.update(pre.counts)
    r.problems[:0] = pre.problems
    return r


@pytest.mark.parametrize("case", golden_params())
def test_golden_build_output_and_reference_files_verify_clean(case, tmp_path):
    build_index(case / "commitlog", tmp_path / "out", config_for(case))
    c = load_case(case)
    r = run_verify(tmp_path / "out", case / "commitlog", c["hashSlotNum"], c["indexNum"], window=True)
    assert r.clean, r.problems[:5]
    assert r.entries_checked == r.expected_entries == json.loads(
        (case / "expected" / "manifest.json").read_text())["index"]["entries"]
    r = run_verify(case / "expected" / "index", case / "commitlog", c["hashSlotNum"], c["indexNum"])
    assert r.clean, r.problems[:5]


@pytest.fixture
def damaged(tmp_path):
    """A copy of g3's reference files, and a function poking bytes into the i-th file."""
    d = tmp_path / "index"
    shutil.copytree(G3 / "expected" / "index", d)
    for p in d.iterdir():
        p.chmod(0o644)
    files = sorted(d.iterdir())

    def poke(i: int, offset: int, fmt: str, value) -> Path:
        path = files[i]
        raw = bytearray(path.read_bytes())
        struct.pack_into(fmt, raw, offset, value)
        path.write_bytes(bytes(raw))
        return path
    return d, files, poke


def kinds_at(r, path: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for p in r.problems:
        if Path(p.file).name == path.name:
            out.setdefault(p.kind, []).append(p.offset)
    return out


def test_wrong_file_size_is_reported_for_that_file(damaged):
    d, files, _ = damaged
    with open(files[4], "ab") as f:
        f.write(b"\0")
    r = run_verify(d)
    assert r.counts["size"] == 1
    assert Path(r.problems[0].file).name == files[4].name


def test_index_count_out_of_range(damaged):
    d, files, poke = damaged
    path = poke(2, 36, ">i", ITEMS + 5)
    assert kinds_at(run_verify(d), path) == {"header": [36]}


def test_slot_value_out_of_range(damaged):
    d, files, poke = damaged
    path = poke(3, 40 + 4 * 10, ">i", 999)
    k = kinds_at(run_verify(d), path)
    assert 40 + 4 * 10 in k["slot-range"]


def test_chain_going_forward_is_a_cycle_risk(damaged):
    d, files, poke = damaged
    path = poke(1, item_at(5, 16), ">i", 40)
    k = kinds_at(run_verify(d), path)
    assert k["chain-order"] == [item_at(5, 16)]


def test_item_linked_to_an_item_of_another_slot(damaged):
    d, files, poke = damaged
    # Item 10 of file 0 gets a keyHash of another slot: its slot's chain now holds a stranger.
    raw = files[0].read_bytes()
    kh = struct.unpack_from(">i", raw, item_at(10))[0]
    path = poke(0, item_at(10), ">i", kh + 1)
    r = run_verify(d, G3 / "commitlog")
    k = kinds_at(r, path)
    assert {"chain-slot", "slot-head"} & set(k)
    assert item_at(10) in k.get("extra", []) or r.counts["extra"] >= 1


def test_hash_slot_count_mismatch(damaged):
    d, files, poke = damaged
    raw = files[5].read_bytes()
    count = struct.unpack_from(">i", raw, 32)[0]
    path = poke(5, 32, ">i", count + 1)
    assert kinds_at(run_verify(d), path) == {"header": [32]}


def test_non_zero_item_zero_and_bytes_past_index_count(damaged):
    d, files, poke = damaged
    last = len(files) - 1
    raw = files[last].read_bytes()
    count = struct.unpack_from(">i", raw, 36)[0]
    assert count < ITEMS, "the last file of g3 is not full"
    poke(last, item_at(0, 4), ">q", 7)
    path = poke(last, item_at(count) + 3, ">B", 1)
    k = kinds_at(run_verify(d), path)
    assert k["item0"] == [item_at(0)]
    assert k["tail"] == [item_at(count) + 3]


def test_header_offsets_and_item_order(damaged):
    d, files, poke = damaged
    path = poke(6, 16, ">q", 1)  # beginPhyOffset
    assert kinds_at(run_verify(d), path) == {"header": [16]}


def orphan_a_chain_head(files, poke, i: int = 7) -> tuple[Path, int]:
    """Empty the slot of an item that heads its chain alone (its prev is 0): that item becomes
    unreachable. Returns (the file, the item's index)."""
    raw = files[i].read_bytes()
    for s in range(SLOTS):
        head = struct.unpack_from(">i", raw, 40 + 4 * s)[0]
        if head and struct.unpack_from(">i", raw, item_at(head, 16))[0] == 0:
            return poke(i, 40 + 4 * s, ">i", 0), head
    raise AssertionError("no single-item chain in the file")


def test_unreachable_item(damaged):
    d, files, poke = damaged
    path, head = orphan_a_chain_head(files, poke)
    k = kinds_at(run_verify(d), path)
    assert k["unreachable"] == [item_at(head)]
    assert "header" in k  # hashSlotCount no longer matches the used slots


def test_offset_that_is_not_a_message_and_a_time_diff_that_disagrees(damaged):
    d, files, poke = damaged
    poke(8, item_at(3, 4), ">q", 12345)
    path = poke(9, item_at(4, 12), ">i", 99999)
    r = run_verify(d, G3 / "commitlog")
    assert item_at(3, 0) in kinds_at(r, files[8])["not-a-message"]
    assert kinds_at(r, path)["time-diff"] == [item_at(4, 12)]


def test_missing_file_leaves_entries_missing(damaged):
    d, files, _ = damaged
    files[10].unlink()
    r = run_verify(d, G3 / "commitlog")
    assert r.counts["missing"] == 49  # a full file of g3 holds indexNum - 1 entries


def test_entries_in_the_wrong_window_are_reported(tmp_path):
    case = GOLDEN / "g1-basic-hourly"
    build_index(case / "commitlog", tmp_path / "out", config_for(case))
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    manifest["files"][0]["window_id"] += 1
    (tmp_path / "out" / "_manifest.json").unlink()
    (tmp_path / "out" / "_manifest.json").write_text(json.dumps(manifest))
    r = run_verify(tmp_path / "out", case / "commitlog", 97, 400, window=True)
    assert r.counts["window"] == manifest["files"][0]["entries"]


def test_cli_exit_codes(damaged, tmp_path, capsys):
    d, files, poke = damaged
    assert main(["verify", "--index", str(G3 / "expected" / "index"), "--hash-slots", "97", "--index-num", "50",
                 "--commitlog", str(G3 / "commitlog")]) == 0
    assert "clean" in capsys.readouterr().out
    poke(1, item_at(5, 16), ">i", 40)
    assert main(["verify", "--index", str(d), "--hash-slots", "97", "--index-num", "50", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["chain-order"] == 1
    assert report["problems"][0]["offset"] == item_at(5, 16)
    assert main(["verify", "--index", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


# --- the content judge both verifies call -----------------------------------------------------------

def _judge(items, entries, messages=None, **kw):
    import numpy as np

    from rocketidx.verify.content import ContentParams, EntryRows, ItemRows, judge_content
    params = dict(items_at=(1000, 5000), begin_timestamps=(10_000, 0), first_offsets=(100, 400), window_ms=None,
                  window_ids=None, lo=100, hi=500, open_start=False, open_end=False)
    params.update(kw)
    a = lambda rows, k: np.array([r[k] for r in rows], np.int64)  # noqa: E731
    found = judge_content(ItemRows(*(a(items, k) for k in range(5))), EntryRows(*(a(entries, k) for k in range(3))),
                          ContentParams(**params), None if messages is None else np.array(messages, np.int64))
    return {f.kind: list(zip(f.file.tolist(), f.offset.tolist(), f.a.tolist(), f.b.tolist(), f.n.tolist()))
            for f in found}


def test_the_content_judge_finds_each_kind_at_its_item():
    entries = [(100, 7, 12_000), (100, 8, 12_000), (200, 9, 15_000), (400, 5, 20_000), (400, 5, 20_000)]
    items = [(0, 1, 100, 7, 2), (0, 2, 100, 8, 2),  # message 100: both keys, diffs right
             (0, 3, 200, 9, 4),                      # diff 4, the store time gives 5
             (0, 4, 300, 3, 0),                      # 300: no entries there
             (1, 1, 400, 5, 0)]                      # one of message 400's two key-5 entries
    got = _judge(items, entries)
    assert got["time-diff"] == [(0, 1000 + 20 * 3 + 12, 4, 5, 1)]
    assert got["candidate"] == [(0, 1000 + 20 * 4, 300, 3, 1)]  # no messages known: the caller decides
    assert got["missing"] == [(1, 0, 400, 5, 1)]  # owned by the file whose offsets hold it
    assert set(got) == {"time-diff", "candidate", "missing"}
    with_messages = _judge(items, entries, messages=[100, 200, 400, 450])
    assert with_messages["not-a-message"] == [(0, 1000 + 20 * 4, 300, 3, 1)]
    assert _judge(items, entries, messages=[100, 200, 300, 400])["extra"] == [(0, 1000 + 20 * 4, 300, 3, 1)]
    assert "missing" not in _judge(items, entries, open_end=True, hi=400)


def test_the_content_judge_keeps_a_negative_key_hash_apart_and_checks_windows():
    entries = [(100, 7, 12_000)]
    items = [(0, 1, 100, -7, 0), (0, 2, 100, 7, 0)]
    got = _judge(items, entries, window_ms=1000, window_ids=(11, 0))
    assert got["extra"] == [(0, 1000 + 20, 100, -7, 1)]
    # 12,000 ms is window 12, not 11: both items point at that message
    assert got["window"] == [(0, 1000 + 20, 0, 0, 1), (0, 1000 + 20 * 2, 0, 0, 1)]


@pytest.mark.parametrize("offset", [0, 8])
def test_header_times_one_millisecond_off_are_found_with_the_commitlog(damaged, offset):
    """Issue 12 fault campaign: a flipped low bit of endTimestamp kept the last item's diff (whole
    seconds) and went unnoticed; the header's times are the first and last entry's store times."""
    d, files, poke = damaged
    raw = files[6].read_bytes()
    path = poke(6, offset, ">q", struct.unpack_from(">q", raw, offset)[0] ^ 1)
    assert kinds_at(run_verify(d, G3 / "commitlog"), path) == {"header-time": [offset]}
