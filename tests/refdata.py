"""Paths to the reference cases in ../shared and helpers to read them.

A plain module, not conftest.py: test modules import it by name (``from refdata import GOLDEN``), and
with several conftest.py files in the tree, ``from conftest import`` would depend on which one pytest
loaded last.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
GOLDEN = SHARED / "golden"
EXTERNAL = SHARED / "external"
GOLDEN_CASES = sorted(p for p in GOLDEN.glob("*") if (p / "case.json").exists()) if GOLDEN.exists() else []


def load_case(case: Path) -> dict:
    return json.loads((case / "case.json").read_text())


def expected_manifest(case: Path) -> dict:
    return json.loads((case / "expected" / "manifest.json").read_text())


def expected_files(case: Path) -> list[Path]:
    files = sorted(expected_manifest(case)["files"], key=lambda f: (f["window"], f["seq"]))
    return [case / "expected" / "index" / f["name"] for f in files]


def golden_params():
    if not GOLDEN_CASES:
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared/golden not present"))]
    return [pytest.param(c, id=c.name) for c in GOLDEN_CASES]
