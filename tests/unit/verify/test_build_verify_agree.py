"""Issue 12, point 3: ``build`` and ``verify`` apply the same broker rules, so ``verify`` of a build's own
output against the log it was built from is clean, whatever the log looks like (so long as the build
accepted it).

The cases are the ones the fault campaign found: records whose PHYSICALOFFSET field is not their
position (the build indexes the field and skips a message below its window's endPhyOffset, as
``buildIndex`` does; verify reported those entries missing), messages sharing one such field, and a time
slice of a log whose clock stepped back (verify expected the entries the slice's time filter left out).
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rocketidx.build.in_process import build_index
from rocketidx.cli import main
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.config import BuildConfig
from rocketidx.output.target import read_manifest
from rocketidx.verify.core import BuildRead, open_for_verify, verify_index
from rocketidx.verify.report import VerifyReport

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from scenarios import BASIC, lay_segment, props, write_segments  # noqa: E402

T0 = 1_700_000_000_000
SIZES = ["--hash-slots", "101", "--index-num", "400", "--timezone", "UTC"]


def _records(n: int):
    return [replace(BASIC, queue_offset=i, store_timestamp_ms=T0 + 1000 * i,
                    properties=props(("UNIQ_KEY", f"U{i}"), ("KEYS", f"k{i} j{i % 3}"))) for i in range(n)]


def _store(root: Path, moves: dict[int, int | str]) -> Path:
    """Eight records, two segments' worth; ``moves``: record -> its PHYSICALOFFSET field (an int, or
    ``"@k"`` for record k's position: two messages then share one offset)."""
    recs = _records(8)
    where = lay_segment(recs, 8192).offsets
    for i, v in moves.items():
        recs[i] = replace(recs[i], phy_offset=where[int(v[1:])] if isinstance(v, str) else v)
    return write_segments(root, [lay_segment(recs, 8192)])


MOVES = {
    "far ahead": {3: 10**6},  # everything after it in its window is below endPhyOffset
    "back to the start": {3: 0},  # below endPhyOffset itself; in a window of its own, shares offset 0
    "onto a later record": {3: "@5"},  # two messages, one offset, different store times
    "first record far ahead": {0: 10**6},  # starts nothing the streaming judge would read
    "negative": {2: -7},  # below an empty file's endPhyOffset (0)
    "two moved": {1: "@6", 6: "@1"},
}


@pytest.mark.parametrize("window", ["0", "1s", "2s"])
@pytest.mark.parametrize("case", sorted(MOVES))
def test_verify_of_a_build_with_misplaced_offsets_is_clean(tmp_path, case, window, capsys):
    store = _store(tmp_path / "store", MOVES[case])
    out = tmp_path / "out"
    assert main(["build", "--commitlog", str(store), "--out", str(out), "--in-process", "--window", window,
                 "--json"] + SIZES) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["phy_mismatch"]["segment"] == "00000000000000000000"
    assert read_manifest(out)["phy_mismatch"] == summary["phy_mismatch"]
    assert main(["verify", "--index", str(out), "--commitlog", str(store), "--json"]) == 0, capsys.readouterr().out
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["clean"] and report["expected_entries"] == report["entries_checked"] == summary["entries"]


def test_the_skip_is_counted_by_the_build_and_expected_by_verify(tmp_path):
    store = _store(tmp_path / "store", MOVES["far ahead"])
    manifest, summary = build_index(store, tmp_path / "out", BuildConfig(hash_slot_num=101, index_num=400))
    assert summary.below_end_phy_offset_skipped == 4 * 3  # records 4..7, three entries each
    files, m = open_for_verify(tmp_path / "out", None, None, VerifyReport())
    report = verify_index(files, store, window_ms=0, window_ids=m.window_ids, rules=BuildRead.of(m))
    assert report.clean and report.expected_entries == summary.entries == 4 * 3


def test_verify_without_the_build_rules_finds_the_skipped_entries_missing(tmp_path):
    """The held pass is what makes the difference: told nothing about the build, a bare reading of the
    same files still switches to it by itself on the first misplaced record, and a real loss (a file's
    item zeroed) is still a problem there."""
    store = _store(tmp_path / "store", MOVES["far ahead"])
    build_index(store, tmp_path / "out", BuildConfig(hash_slot_num=101, index_num=400))
    files, m = open_for_verify(tmp_path / "out", None, None, VerifyReport())
    assert verify_index(files, store, window_ms=0, window_ids=m.window_ids).clean
    path = Path(files[0].path)
    data = bytearray(path.read_bytes())
    item2 = 40 + 4 * 101 + 20 * 2
    data[item2:item2 + 20] = bytes(20)
    path.write_bytes(bytes(data))
    files, m = open_for_verify(tmp_path / "out", None, None, VerifyReport())
    report = verify_index(files, store, window_ms=0, window_ids=m.window_ids, rules=BuildRead.of(m))
    assert not report.clean and report.counts["missing"] >= 1


def test_verify_of_a_time_slice_expects_only_the_slice(tmp_path, capsys):
    """A clock that stepped back puts records of other hours among the slice's offsets; the slice's
    build left them out, and verify must not expect them."""
    generate_store(tmp_path / "store", GenConfig(messages=6000, segment_bytes=256 * 1024, span_ms=10 * 3_600_000,
                                                 clock_steps=3, clock_back_ms=90 * 60_000, seed=3))
    out = tmp_path / "out"
    assert main(["build", "--commitlog", str(tmp_path / "store"), "--out", str(out), "--in-process", "--window", "1h",
                 "--from-time", str(T0 + 3 * 3_600_000), "--to-time", str(T0 + 6 * 3_600_000)] + SIZES) == 0
    capsys.readouterr()
    assert main(["verify", "--index", str(out), "--commitlog", str(tmp_path / "store"), "--in-process"]) == 0, \
        capsys.readouterr().out
