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


RETRY_TOPIC = "%RETRY%GID_" + "x" * 129  # the generator's: 140 characters, over 127 bytes, so magic v2


def _drawn(fig):
    """Draw ``fig`` as a notebook shows it, with every warning (such as a layout not applied) an error."""
    import warnings

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FigureCanvasAgg(fig).draw()
    return fig


def _labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()]


def test_a_long_topic_is_shortened_in_every_label_and_leaves_room_for_the_bars():
    queues = pd.DataFrame([{"topic": t, "queue_id": q, "entries": 10 + q}
                           for t in [RETRY_TOPIC, "Topic0", "Topic1"] for q in range(8)])
    topics = pd.DataFrame({"topic": [RETRY_TOPIC, "Topic0"], "entries": [139, 1848], "messages": [57, 761],
                           "keys_per_message": [2.4, 2.4]})
    hot = pd.DataFrame({"key_hash": [7, 9], "entries": [6, 5], "distinct_keys": [1, 1],
                        "keys": [[f"{RETRY_TOPIC}#K886"], ["Topic0#K5"]]})
    for fig in (plots.plot_queue_entries(queues), plots.plot_topics(topics), plots.plot_hot_keys(hot)):
        labels = _labels(_drawn(fig))
        assert labels and max(map(len, labels)) <= plots.LABEL_WIDTH + 6, labels  # + " (+n)" or ":queue"
        assert any(label.startswith("%RETRY%GID_") for label in labels)
    bars = _drawn(plots.plot_queue_entries(queues)).axes[0].get_position()
    assert bars.height > 0.45  # the labels took two thirds of the figure before
    assert plots._short(f"{RETRY_TOPIC}#K886").endswith("#K886")  # a key keeps its end
    assert queues["topic"].iloc[0] == RETRY_TOPIC  # plotting changes no table


def test_count_axes_tick_whole_numbers_with_a_single_value():
    """The sample has one collision size: a lone bar at 2 was ticked 1.6, 1.8, 2.0, 2.2, 2.4."""
    fig = _drawn(plots.plot_collisions(pd.DataFrame({"entries_per_hash": [2], "key_hashes": [40]}),
                                       pd.DataFrame({"key_hash": [7], "distinct_keys": [2], "entries": [4]})))
    top, bottom = fig.axes
    for ticks in (top.get_xticks(), bottom.get_xticks(), bottom.get_yticks()):
        assert len(ticks) and all(float(t).is_integer() for t in ticks), ticks


def test_tables_are_shown_with_utc_times_and_short_names_and_stay_as_computed():
    queues = pd.DataFrame({"topic": [RETRY_TOPIC, "Topic0"], "queue_id": [0, 1], "bucket_ms": [300_000, 300_000],
                           "first_store_time_ms": [1_700_000_117_602, 1_700_000_000_000],
                           "keys": [[f"{RETRY_TOPIC}#K1"], ["Topic0#K2"]]})
    before = queues.copy(deep=True)
    shown = plots.readable(queues)
    assert list(shown.columns) == ["topic", "queue_id", "bucket_ms", "first_store_time (UTC)", "keys"]
    assert str(shown["first_store_time (UTC)"].iloc[0]) == "2023-11-14 22:15:17.602000"
    assert shown["bucket_ms"].tolist() == [300_000, 300_000]  # a duration, not a time
    assert max(len(s) for s in shown["topic"]) <= plots.LABEL_WIDTH
    assert shown["keys"].iloc[0][0].endswith("#K1") and len(shown["keys"].iloc[0][0]) <= plots.LABEL_WIDTH
    pd.testing.assert_frame_equal(queues, before)
    summary = plots.readable_summary({"begin_timestamp": 1_700_000_000_002, "bucket_ms": 300_000, "files": 3})
    assert str(summary.loc["begin_timestamp (UTC)", "value"]) == "2023-11-14 22:13:20.002000"
    assert summary.loc["bucket_ms", "value"] == 300_000
