"""Fixtures of the statistics tests: the Spark tests' session-scoped ``spark`` fixture, and small stores.

``spark`` is the one tests/spark/conftest.py defines (one local session for the whole run); a copy of
it stands in only where that file is absent.
"""
from __future__ import annotations

import os
import sys

import pytest

try:
    from spark.conftest import spark  # noqa: F401  tests/ is on sys.path (tests/conftest.py is rootless)
except ImportError:
    @pytest.fixture(scope="session")
    def spark():
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from rocketidx.spark.session import get_session
        session = get_session("local[2]", {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                                           "spark.sql.shuffle.partitions": "2",
                                           "spark.sql.session.timeZone": "UTC"})
        yield session
        session.stop()


@pytest.fixture(scope="session")
def small_store(tmp_path_factory):
    """A generated store (3,000 messages over 2 h) and its windowed build output with small files:
    10-minute windows of ~600 entries, 1,009 slots, 400 items, so every window rolls over into a second file."""
    from rocketidx.build import build_index
    from rocketidx.config import BuildConfig
    from rocketidx.generate import GenConfig, generate_store
    root = tmp_path_factory.mktemp("stats-store")
    store, out = root / "store", root / "out"
    generate_store(store, GenConfig(messages=3000, segment_bytes=1 << 20, span_ms=2 * 3_600_000, seed=11))
    build_index(store, out, BuildConfig(hash_slot_num=1009, index_num=400, window_ms=600_000, timezone="UTC"))
    return store, out
