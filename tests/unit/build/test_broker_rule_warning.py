"""Issue 20, item 3: entries a broker rule left out are said on stderr, as an early stop is, and
``build --strict`` fails on them (exit 1). In process here; tests/spark/test_engines_agree.py has both
engines on the issue's reproducer."""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rocketidx.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from scenarios import BASIC, lay_segment, props, write_segments  # noqa: E402

T0 = 1_700_000_000_000
SIZES = ["--hash-slots", "101", "--index-num", "400", "--timezone", "UTC", "--window", "0", "--in-process"]


def _store(root: Path, field: int | None) -> tuple[Path, tuple[int, ...]]:
    recs = [replace(BASIC, queue_offset=i, store_timestamp_ms=T0 + 1000 * i,
                    properties=props(("UNIQ_KEY", f"U{i}"), ("KEYS", f"k{i}"))) for i in range(6)]
    if field is not None:
        recs[2] = replace(recs[2], phy_offset=field)
    laid = lay_segment(recs, 8192)
    return write_segments(root, [laid]), laid.offsets


def test_entries_below_end_phy_offset_are_reported_and_strict_fails(tmp_path, capsys):
    store, where = _store(tmp_path / "store", 10**6)  # records 3..5 fall below the file's endPhyOffset
    assert main(["build", "--commitlog", str(store), "--out", str(tmp_path / "a"), "--json"] + SIZES) == 0
    cap = capsys.readouterr()
    summary = json.loads(cap.out)
    assert summary["below_end_phy_offset_skipped"] == 6 and summary["below_end_first_offset"] == where[3]
    assert cap.err.splitlines() == [
        f"rocketidx build: warning: 6 entries left out by the broker's rule that skips a message below its "
        f"IndexFile's endPhyOffset, the first from the record at 00000000000000000000 @ byte {where[3]} (offset "
        f"{where[3]}); PHYSICALOFFSET fields that are not their records' offsets, the first at "
        f"00000000000000000000 @ byte {where[2]} (its entries point where the field says, as the broker indexes "
        f"them) (--strict makes this exit 1)"]
    assert main(["build", "--commitlog", str(store), "--out", str(tmp_path / "b"), "--strict"] + SIZES) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "6 entries left out" in err[0] and "--strict" not in err[0]


@pytest.mark.parametrize("field, skipped", [(0, 2), (None, 0)])
def test_a_lying_field_alone_is_reported_and_a_clean_log_is_not(tmp_path, capsys, field, skipped):
    """A field pointing back (the record itself falls below endPhyOffset: its 2 entries) still fails
    --strict; a clean log says nothing and passes it."""
    store, where = _store(tmp_path / "store", field)
    code = main(["build", "--commitlog", str(store), "--out", str(tmp_path / "o"), "--json", "--strict"] + SIZES)
    cap = capsys.readouterr()
    assert json.loads(cap.out)["below_end_phy_offset_skipped"] == skipped
    if field is None:
        assert code == 0 and cap.err == ""
    else:
        assert code == 1 and "PHYSICALOFFSET fields that are not their records' offsets" in cap.err
