"""rocketidx.plots on edge cases (no Spark): empty tables give a figure that says so, never an error."""
from __future__ import annotations

import pandas as pd

from rocketidx import plots


def test_empty_tables_still_draw(tmp_path):
    empty = {
        "files": pd.DataFrame(columns=["name", "window_id", "window_start_ms", "seq", "entries", "fill_ratio",
                                       "slot_usage", "index_num", "hash_slot_num"]),
        "buckets": pd.DataFrame(columns=["bucket_start_ms", "entries", "messages"]),
        "chains": pd.DataFrame(columns=["file", "chain_length", "slots"]),
        "slot_bins": pd.DataFrame(columns=["file", "bin", "slots", "used_slots"]),
        "hot_keys": pd.DataFrame(columns=["key_hash", "entries"]),
        "collisions": pd.DataFrame(columns=["entries_per_hash", "key_hashes"]),
        "sizing": pd.DataFrame(columns=["scenario"]),
    }
    figs = plots.render_figures(empty, tmp_path)
    assert set(figs) == set(plots.FIGURES) - {"topics"}  # no CommitLog table, no topics figure
    assert all((tmp_path / f"{n}.png").stat().st_size > 0 for n in figs)


def test_a_broker_directory_without_windows(tmp_path):
    files = pd.DataFrame({"name": ["20240101000000000"], "window_id": [None], "window_start_ms": [None], "seq": [None],
                          "entries": [10], "fill_ratio": [0.5], "slot_usage": [0.1], "index_num": [21],
                          "hash_slot_num": [100]})
    buckets = pd.DataFrame({"bucket_start_ms": [0, 60_000], "entries": [6, 4], "messages": [3, 2]})
    fig = plots.plot_entries_over_time(buckets, files)
    fig.savefig(tmp_path / "x.png")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("no windows" in t for t in texts)
