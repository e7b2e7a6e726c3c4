"""Issue 20, item 3: one outcome per log, whatever the engine.

The reproducer (a ``gen`` store, 14 bytes of garbage over a record's PHYSICALOFFSET field in the second
segment): the in-process build exited 0 without a word about the 1,073 entries the broker's endPhyOffset
rule left out, and Spark refused the log (exit 2). Now both engines give the same exit code, counts,
stop and file bytes, say on stderr what a broker rule left out (count, first offset), and ``--strict``
exits 1 on both. A small sample of the fault harness's engines part (``bench/campaigns/faults.py --only
engines``) runs here too.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from rocketidx.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "campaigns"))
import faults  # noqa: E402

pytestmark = pytest.mark.spark


def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def reproducer(tmp_path_factory) -> Path:
    return faults.reproducer_store(tmp_path_factory.mktemp("issue20"))


ENGINES = {"in-process": ["--in-process"], "spark": ["--master", "local[2]"]}


def test_the_reproducer_gives_one_outcome_on_both_engines(spark, reproducer, tmp_path):
    seen = {}
    for name, flags in ENGINES.items():
        code, out, err = _run(["build", "--commitlog", str(reproducer), "--out", str(tmp_path / name), "--json",
                               *faults.REPRODUCER_SIZES] + flags)
        assert code == 0, err
        summary = json.loads(out)  # the summary is the only stdout
        warning = [ln for ln in err.splitlines() if ln.startswith("rocketidx build: warning")]
        assert warning == [
            "rocketidx build: warning: 1,073 entries left out by the broker's rule that skips a message below its "
            "IndexFile's endPhyOffset, the first from the record at 00000000000004194304 @ byte 1000419 (offset "
            "5194723); PHYSICALOFFSET fields that are not their records' offsets, the first at "
            "00000000000004194304 @ byte 999977 (its entries point where the field says, as the broker indexes "
            "them) (--strict makes this exit 1)"], name
        seen[name] = ({k: summary[k] for k in ("entries", "messages", "below_end_phy_offset_skipped",
                                               "below_end_first_offset", "stop", "phy_mismatch")},
                      faults._digests(tmp_path / name))
    assert seen["in-process"] == seen["spark"]
    counts = seen["spark"][0]
    assert (counts["entries"], counts["messages"], counts["below_end_phy_offset_skipped"]) == (48_044, 20_000, 1_073)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_strict_fails_on_entries_a_broker_rule_left_out(spark, reproducer, tmp_path, engine):
    code, out, err = _run(["build", "--commitlog", str(reproducer), "--out", str(tmp_path / "o"), "--json",
                           "--strict", *faults.REPRODUCER_SIZES] + ENGINES[engine])
    assert code == 1
    assert json.loads(out)["below_end_phy_offset_skipped"] == 1_073
    assert [ln for ln in err.splitlines() if ln.startswith("rocketidx build:")] == [
        ln for ln in err.splitlines() if "1,073 entries left out" in ln and "--strict" not in ln]


def test_a_sample_of_the_harness_engines_part_agrees(spark, tmp_path):
    counts, failures = faults.run_engines(16, seed=7, work=tmp_path / "engines", spark=spark, reproducer=False,
                                          shuffle_every=4)
    assert not failures, failures[0]["error"]
    assert sum(v for k, v in counts.items() if k.startswith("agree: exit")) == 16
    assert counts["agree, broker rule logs (either)"] >= 4 and counts["shuffle plan (library) agrees too"] == 4
