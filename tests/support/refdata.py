"""Paths to the reference cases and helpers to read them.

The cases live in the repository (``tests/reference/``, see its README), so a bare clone tests them all;
a ``../shared/golden`` beside the clone only adds the cases it has that the copy lacks.

A plain module, not conftest.py: test modules import it by name (``from refdata import GOLDEN``), and
with several conftest.py files in the tree, ``from conftest import`` would depend on which one pytest
loaded last.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "tests" / "reference"
GOLDEN = REFERENCE / "golden"
EXTERNAL = REFERENCE / "external"
SHARED = ROOT.parent / "shared"          # optional: a newer copy of the reference data, where present


def _cases(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*") if (p / "case.json").exists()) if root.exists() else []


_kept = {p.name for p in _cases(GOLDEN)}
GOLDEN_CASES = sorted(_cases(GOLDEN) + [p for p in _cases(SHARED / "golden") if p.name not in _kept],
                      key=lambda p: p.name)


def load_case(case: Path) -> dict:
    return json.loads((case / "case.json").read_text())


def expected_manifest(case: Path) -> dict:
    return json.loads((case / "expected" / "manifest.json").read_text())


def expected_files(case: Path) -> list[Path]:
    files = sorted(expected_manifest(case)["files"], key=lambda f: (f["window"], f["seq"]))
    return [case / "expected" / "index" / f["name"] for f in files]


def case_config(case: Path):
    """The case's sizes and window as a :class:`rocketidx.config.BuildConfig` (names in UTC)."""
    from rocketidx.config import BuildConfig
    c = load_case(case)
    return BuildConfig(hash_slot_num=c["hashSlotNum"], index_num=c["indexNum"], window_ms=c["windowMillis"],
                       timezone="UTC")


def expected_queries(case: Path) -> list[dict]:
    """The case's queries with RocketMQ's answers (``offsets``)."""
    with open(case / "expected" / "queries.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def golden_params():
    if not GOLDEN_CASES:
        return [pytest.param(None, marks=pytest.mark.skip(reason="tests/reference/golden not present"))]
    return [pytest.param(c, id=c.name) for c in GOLDEN_CASES]
