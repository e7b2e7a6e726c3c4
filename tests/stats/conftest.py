"""Fixtures of the statistics tests: small stores (``spark`` is tests/conftest.py's one session)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def small_store(tmp_path_factory):
    """A generated store (3,000 messages over 2 h) and its windowed build output with small files:
    10-minute windows of ~600 entries, 1,009 slots, 400 items, so every window rolls over into a second file."""
    from rocketidx.build.in_process import build_index
    from rocketidx.config import BuildConfig
    from rocketidx.sample.generate import GenConfig, generate_store
    root = tmp_path_factory.mktemp("stats-store")
    store, out = root / "store", root / "out"
    generate_store(store, GenConfig(messages=3000, segment_bytes=1 << 20, span_ms=2 * 3_600_000, seed=11))
    build_index(store, out, BuildConfig(hash_slot_num=1009, index_num=400, window_ms=600_000, timezone="UTC"))
    return store, out
