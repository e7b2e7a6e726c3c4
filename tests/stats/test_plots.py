"""rocketidx.stats.plots on edge cases (no Spark): empty tables give a figure that says so, never an error."""
from __future__ import annotations

import pandas as pd

from rocketidx.stats import plots


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


def test_the_collisions_plot_ticks_whole_numbers_on_its_count_axes():
    """Entries per hash and keys per hash are counts: a tick at 1.5 would read as half an entry."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    collisions = pd.DataFrame({"entries_per_hash": [1, 2], "key_hashes": [900, 40]})
    true_collisions = pd.DataFrame({"key_hash": [7, 9], "distinct_keys": [2, 3], "entries": [4, 6]})
    fig = plots.plot_collisions(collisions, true_collisions)
    FigureCanvasAgg(fig).draw()
    top, bottom = fig.axes
    for ticks in (top.get_xticks(), bottom.get_xticks(), bottom.get_yticks()):
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
