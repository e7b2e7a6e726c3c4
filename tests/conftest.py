"""Shared fixtures: paths to the reference cases (tests/reference), and the reader-path parameter."""
from __future__ import annotations

import pytest

from refdata import (EXTERNAL, GOLDEN, GOLDEN_CASES, ROOT, SHARED, expected_files,  # noqa: F401
                     expected_manifest, golden_params, load_case)


def _reader_native_params():
    from rocketidx.native import native_available
    return [pytest.param(False, id="numpy"),
            pytest.param(True, id="native", marks=pytest.mark.skipif(
                not native_available(), reason="rocketidx._native is not built"))]


@pytest.fixture(params=_reader_native_params())
def reader_native(request) -> bool:
    """Run a reader/entries test on the numpy reference path and on the compiled kernel."""
    return request.param
