"""A small fast sample of the fault campaign (bench/campaigns/faults.py; the full run is ``make faults``): mutated
logs through build, verify, query, stats, backfill and the CLI; damaged indexes through verify, query and
stats; queries racing builds. Zero failures in each, as in the full run."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "campaigns"))
import faults  # noqa: E402


def test_mutated_logs_never_raise_untyped_errors_and_build_and_verify_agree(tmp_path):
    counts, failures = faults.run_logs(250, seed=7, workers=1, work=tmp_path / "logs")
    assert not failures, failures[0]["error"]
    assert counts["verify: clean"] >= 100 and sum(v for k, v in counts.items() if k.startswith("build:")) == 250
    assert all(counts[f"mutation: {m}"] for m in faults.MUTATIONS)


def test_damaged_indexes_are_reported_or_refused_never_a_traceback():
    counts, failures = faults.run_index(80, seed=7)
    assert not failures, failures[0]["error"]
    assert not any("UNDETECTED" in k for k in counts), counts


def test_damaged_consumequeues_are_all_reported_with_the_log_and_clean_ones_never(tmp_path):
    from cq_faults import KINDS, run_queues
    counts, failures = run_queues(2 * len(KINDS), seed=7, work=tmp_path)
    assert not failures, failures[0]["error"]
    assert all(counts[f"{k}: with the log reported"] for k in KINDS if k != "delete-middle")
    assert counts["clean base, with the log: clean"] == counts["clean base, files alone: clean"] >= 7


@pytest.mark.slow
def test_queries_racing_builds_see_one_build_each():
    counts, failures = faults.run_race(60, 4, seed=7)
    assert not failures and counts["round: first log's answers"] and counts["round: second log's answers"]


def test_damaged_stores_are_repaired_exactly_where_verify_reports_them(tmp_path):
    from store_faults import KINDS, run_stores
    counts, failures = run_stores(2 * len(KINDS), seed=7, work=tmp_path, workers=1)
    assert not failures, failures[:3]
    assert sum(v for k, v in counts.items() if "identical to the clean base" in k) >= len(KINDS)
    assert not any("FAILURE" in k or "CLEAN" in k for k in counts)


def test_a_repair_killed_at_random_moments_ends_where_an_uninterrupted_one_does(tmp_path):
    from store_faults import run_repair_kills
    counts, failures = run_repair_kills(2, 20_000, 7, tmp_path, faults.RIDX, faults._kill_group_after)
    assert not failures, failures[:3]
    assert sum(v for k, v in counts.items() if "nothing lost" in k) == 2
