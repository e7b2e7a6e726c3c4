"""Shared fixtures: paths to the reference cases in ../shared, and scratch directories."""
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


def _reader_native_params():
    from rocketidx.messages import native_available
    return [pytest.param(False, id="numpy"),
            pytest.param(True, id="native", marks=pytest.mark.skipif(
                not native_available(), reason="rocketidx._native is not built"))]


@pytest.fixture(params=_reader_native_params())
def reader_native(request) -> bool:
    """Run a reader/entries test on the numpy reference path and on the compiled kernel."""
    return request.param
