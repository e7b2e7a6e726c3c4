"""Index statistics (pandas, from :meth:`rocketidx.spark.stats.IndexStats.to_pandas`) -> matplotlib Figures.

In: the small pandas tables named as in :class:`rocketidx.spark.stats.IndexStats` (``files``, ``buckets``,
``chains``, ``slot_bins``, ``hot_keys``, ``collisions``, ``true_collisions``, ``topics``, ``sizing``).
Out: one :class:`matplotlib.figure.Figure` per picture, built without ``pyplot`` so no GUI backend or
global state is involved (safe on a headless worker or CI; a notebook shows a Figure when displayed);
:func:`render_figures` draws every picture the tables allow and optionally saves each as PNG.
:func:`plot_queue_entries` draws the ConsumeQueue table of :func:`rocketidx.stats.queues.queue_stats`;
:func:`readable` gives a copy of a table for display (long names shortened, epoch-millisecond times as UTC
datetimes), :func:`readable_summary` the summary with its times likewise.
Stays true: plotting and display copies never change a table; times are shown in UTC; a name in a label
or a table cell is at most :data:`LABEL_WIDTH` characters (the generator's retry topic has 140); an empty table gives a figure that
says so rather than an error.
"""
from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

_SIZE = (9.0, 4.2)


def _utc(ms) -> pd.Series:
    return pd.to_datetime(pd.Series(ms, dtype="int64"), unit="ms")  # naive datetimes, read as UTC


def _empty(fig: Figure, ax, what: str) -> Figure:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return fig


LABEL_WIDTH = 40  # characters of a name in a label or a displayed table cell
# Epoch-millisecond columns of the statistics, queue and message tables; not durations such as bucket_ms.
TIME_COLUMN = re.compile(r"(_timestamp|_timestamp_ms|_time_ms|_start_ms)$")


def _short(name: str, width: int = LABEL_WIDTH) -> str:
    """``name`` cut in the middle to ``width`` characters: a retry topic keeps its ``%RETRY%GID_`` head and a
    ``topic#key`` its key."""
    if len(name) <= width:
        return name
    tail = (width - 1) // 3
    return name[: width - 1 - tail] + "…" + name[len(name) - tail:]


def _count_ticks(axis, values) -> None:
    """Whole-number ticks on an axis of counts. With few values, a tick under each: MaxNLocator's integer
    mode gives up when the view holds fewer than two integers (one bar at 2 spans 1.6 to 2.4)."""
    values = np.unique(np.asarray(values, np.int64))
    if 0 < len(values) <= 12:
        axis.set_ticks(values)
    else:
        axis.set_major_locator(MaxNLocator(integer=True))


def _step_ms(starts, fallback: int) -> int:
    d = np.diff(np.sort(np.unique(np.asarray(starts, np.int64))))
    return int(d.min()) if len(d) else fallback


def plot_entries_over_time(buckets: pd.DataFrame, files: pd.DataFrame | None = None,
                           bucket_ms: int | None = None) -> Figure:
    """Entries per window (files stacked by sequence, so a window that rolled over into a second file
    shows two colours), and entries and messages per time bucket."""
    fig = Figure(figsize=(_SIZE[0], 6.0), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[1, 1.4])
    top.set_title("Index entries over time")
    f = files[files["entries"] > 0] if files is not None else None
    if f is not None and len(f) and f["window_start_ms"].notna().all():
        per = f.pivot_table(index="window_start_ms", columns="seq", values="entries", aggfunc="sum",
                            fill_value=0).sort_index()
        width = pd.Timedelta(milliseconds=_step_ms(per.index, 3_600_000) * 0.9)
        x, base = _utc(per.index), np.zeros(len(per))
        for seq in per.columns:
            top.bar(x, per[seq].to_numpy(), width=width, bottom=base, align="edge", label=f"file seq {int(seq)}")
            base += per[seq].to_numpy()
        if len(per.columns) > 1:
            top.legend(loc="upper right", fontsize="small")
        top.set_ylabel("entries / window")
    else:
        top.text(0.5, 0.5, "no windows (a broker directory or one window)", ha="center", va="center",
                 transform=top.transAxes)
    if len(buckets) == 0:
        return _empty(fig, bottom, "entries")
    width = pd.Timedelta(milliseconds=(bucket_ms or _step_ms(buckets["bucket_start_ms"], 60_000)) * 0.9)
    x = _utc(buckets["bucket_start_ms"])
    bottom.bar(x, buckets["entries"], width=width, align="edge", label="entries", color="tab:blue")
    bottom.bar(x, buckets["messages"], width=width, align="edge", label="messages", color="tab:orange")
    bottom.set_ylabel("per bucket")
    bottom.legend(loc="upper right", fontsize="small")
    bottom.set_xlabel("store time (UTC)")
    return fig


def plot_fill(files: pd.DataFrame) -> Figure:
    """Fill ratio of every file (entries / (indexNum - 1)) and its slot usage (used slots / hashSlotNum)."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    ax = fig.subplots()
    if len(files) == 0:
        return _empty(fig, ax, "files")
    x = np.arange(len(files))
    ax.bar(x - 0.2, files["fill_ratio"] * 100, width=0.4, label="fill: entries / (indexNum-1)")
    ax.bar(x + 0.2, files["slot_usage"] * 100, width=0.4, label="slots used / hashSlotNum")
    ax.set_ylabel("%")
    ax.set_xticks(x, files["name"], rotation=70, ha="right", fontsize="x-small")
    ax.set_title(f"Fill per file ({len(files)} files, indexNum {int(files['index_num'].iloc[0]):,}, "
                 f"hashSlotNum {int(files['hash_slot_num'].iloc[0]):,})")
    ax.legend(fontsize="small")
    return fig


def plot_chain_histogram(chains: pd.DataFrame) -> Figure:
    """How many slots have a chain of each length, over all files (log scale)."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    ax = fig.subplots()
    if len(chains) == 0:
        return _empty(fig, ax, "chains")
    h = chains.groupby("chain_length")["slots"].sum().sort_index()
    ax.bar(h.index, h.to_numpy(), width=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("chain length (items on one slot's chain)")
    ax.set_ylabel("slots")
    mean = float((h.index.to_numpy() * h.to_numpy()).sum() / h.sum())
    cum = np.cumsum(h.to_numpy()) / h.sum()
    p99 = int(h.index[np.searchsorted(cum, 0.99)])
    ax.set_title(f"Chain lengths over used slots: mean {mean:.2f}, p99 {p99}, max {int(h.index.max())}")
    return fig


def plot_slot_occupancy(slot_bins: pd.DataFrame) -> Figure:
    """Share of used slots along each file's slot table (rows: files, columns: slot-table bins):
    a uniform hash gives an even colour per row."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    ax = fig.subplots()
    if len(slot_bins) == 0:
        return _empty(fig, ax, "slots")
    grid = slot_bins.assign(share=slot_bins["used_slots"] / slot_bins["slots"]).pivot(
        index="file", columns="bin", values="share")
    im = ax.imshow(grid.to_numpy(), aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(im, ax=ax, label="used slots / slots in bin")
    ax.set_xlabel("slot-table bin (slot index ->)")
    ax.set_ylabel("file")
    ax.set_title("Slot occupancy")
    return fig


def plot_hot_keys(hot_keys: pd.DataFrame) -> Figure:
    """The key hashes with most entries, labelled with their keys when the CommitLog was read."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    ax = fig.subplots()
    if len(hot_keys) == 0:
        return _empty(fig, ax, "keys")
    h = hot_keys.iloc[::-1]
    if "keys" in h.columns:
        labels = [(_short(k[0]) + (f" (+{int(d) - 1})" if d and d > 1 else "")) if isinstance(k, (list, np.ndarray)) and len(k)
                  else f"hash {kh}" for k, d, kh in zip(h["keys"], h.get("distinct_keys", [None] * len(h)), h["key_hash"])]
    else:
        labels = [f"hash {kh}" for kh in h["key_hash"]]
    ax.barh(np.arange(len(h)), h["entries"])
    ax.set_yticks(np.arange(len(h)), labels, fontsize="x-small")
    ax.set_xlabel("entries (all files)")
    ax.set_title(f"Hot keys: top {len(h)} by entries")
    return fig


def plot_collisions(collisions: pd.DataFrame, true_collisions: pd.DataFrame | None = None) -> Figure:
    """Entries per distinct key hash; with the CommitLog, also distinct keys per colliding hash."""
    panels = 2 if true_collisions is not None else 1
    fig = Figure(figsize=(_SIZE[0], _SIZE[1] * (1 if panels == 1 else 1.6)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(panels, 1))
    ax = axes[0]
    if len(collisions) == 0:
        return _empty(fig, ax, "key hashes")
    ax.bar(collisions["entries_per_hash"], collisions["key_hashes"], width=0.8)
    _count_ticks(ax.xaxis, collisions["entries_per_hash"])  # counts: no tick at 1.5 entries
    ax.set_yscale("log")
    ax.set_xlabel("entries per key hash")
    ax.set_ylabel("key hashes")
    ax.set_title(f"Entries per key hash ({int(collisions['key_hashes'].sum()):,} distinct hashes)")
    if true_collisions is not None:
        ax2 = axes[1]
        if len(true_collisions) == 0:
            ax2.text(0.5, 0.5, "no true collisions: every key hash belongs to one key", ha="center",
                     va="center", transform=ax2.transAxes)
            ax2.set_axis_off()
        else:
            h = true_collisions.groupby("distinct_keys").size()
            ax2.bar(h.index, h.to_numpy(), width=0.8, color="tab:red")
            _count_ticks(ax2.xaxis, h.index)
            ax2.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax2.set_xlabel("distinct keys sharing one key hash")
            ax2.set_ylabel("key hashes")
            ax2.set_title(f"True collisions: {len(true_collisions):,} hashes hold {int(true_collisions['distinct_keys'].sum()):,} "
                          "keys (their queries need client-side filtering)")
    return fig


def plot_sizing(sizing: pd.DataFrame) -> Figure:
    """Predicted mean chain length and files per day for each sizing scenario, file size in the labels."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    left, right = fig.subplots(1, 2)
    if len(sizing) == 0:
        return _empty(fig, left, "sizing")
    labels = [f"{r.scenario}\n{r.hash_slot_num:,} slots\n{r.index_num:,} items\n{r.file_bytes / 2**20:,.0f} MiB"
              for r in sizing.itertuples()]
    x = np.arange(len(sizing))
    left.bar(x, sizing["predicted_mean_chain"], color="tab:blue")
    left.set_xticks(x, labels, fontsize="x-small")
    left.set_title("mean chain length (fullest file)")
    if "target_mean_chain" in sizing:
        left.axhline(float(sizing["target_mean_chain"].iloc[0]), color="k", linestyle="--", label="target")
        left.legend(fontsize="small")
    right.bar(x, sizing["predicted_files_per_day"], color="tab:green")
    right.set_xticks(x, labels, fontsize="x-small")
    right.set_title("files per day")
    if "target_files_per_day" in sizing:
        right.axhline(float(sizing["target_files_per_day"].iloc[0]), color="k", linestyle="--", label="target")
        right.legend(fontsize="small")
    fig.suptitle("Sizing: hashSlotNum and indexNum for the observed traffic")
    return fig


def plot_topics(topics: pd.DataFrame) -> Figure:
    """Entries and messages per topic, and keys per message."""
    fig = Figure(figsize=_SIZE, layout="constrained")
    ax = fig.subplots()
    if len(topics) == 0:
        return _empty(fig, ax, "topics")
    x = np.arange(len(topics))
    ax.bar(x - 0.2, topics["entries"], width=0.4, label="entries")
    ax.bar(x + 0.2, topics["messages"], width=0.4, label="messages")
    ax.set_xticks(x, [_short(t, 24) for t in topics["topic"]], rotation=30, ha="right", fontsize="small")
    for xi, k in zip(x, topics["keys_per_message"]):
        ax.annotate(f"{k:.2f}/msg", (xi, 0), xytext=(0, 3), textcoords="offset points", ha="center", fontsize="x-small")
    ax.legend(fontsize="small")
    ax.set_title("Per topic (keys per message annotated)")
    return fig


def plot_queue_entries(queues: pd.DataFrame, total: int | None = None) -> Figure:
    """Entries per ConsumeQueue (rows of :func:`rocketidx.stats.queues.queue_stats`: topic, queue_id,
    entries), one bar each, labelled ``topic:queueId`` with the topic shortened."""
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    ax = fig.subplots()
    if len(queues) == 0:
        return _empty(fig, ax, "queues")
    x = np.arange(len(queues))
    ax.bar(x, queues["entries"], color="tab:blue")
    labels = [f"{_short(str(t), 24)}:{int(q)}" for t, q in zip(queues["topic"], queues["queue_id"])]
    ax.set_xticks(x, labels, rotation=90, fontsize=7)
    ax.set_ylabel("entries")
    entries = int(queues["entries"].sum()) if total is None else total
    ax.set_title(f"Entries per queue: {len(queues)} queues, {entries:,} entries")
    return fig


def readable(table: pd.DataFrame, width: int = LABEL_WIDTH) -> pd.DataFrame:
    """A copy of ``table`` to display: text (and lists of text) shortened to ``width`` characters, and each
    epoch-millisecond time column (:data:`TIME_COLUMN`) as UTC datetimes, renamed ``<name> (UTC)``."""
    out = table.copy()
    for col in out.columns:
        values = out[col]
        if TIME_COLUMN.search(str(col)) and pd.api.types.is_numeric_dtype(values):
            name = re.sub(r"_ms$", "", str(col)) + " (UTC)"
            out[col] = pd.to_datetime(values, unit="ms")  # naive datetimes, read as UTC
            out = out.rename(columns={col: name})
        elif values.dtype == object:
            out[col] = [_short_cell(v, width) for v in values]
    return out


def readable_summary(summary: dict) -> pd.DataFrame:
    """A statistics summary (``IndexStats.summary()``) as a one-column table to display, its times as UTC
    datetimes as :func:`readable` shows them (its text is paths and advice: kept whole)."""
    rows = {}
    for k, v in summary.items():
        if TIME_COLUMN.search(k) and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            rows[re.sub(r"_ms$", "", k) + " (UTC)"] = pd.Timestamp(int(v), unit="ms")
        else:
            rows[k] = v
    return pd.Series(rows, name="value", dtype=object).to_frame()


def _short_cell(value, width: int):
    if isinstance(value, str):
        return _short(value, width)
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_short(v, width) if isinstance(v, str) else v for v in value]
    return value


#: figure name -> (function, tables it takes, in order; a missing optional table is passed as None)
FIGURES = {
    "entries_over_time": (plot_entries_over_time, ("buckets", "files")),
    "fill": (plot_fill, ("files",)),
    "chain_lengths": (plot_chain_histogram, ("chains",)),
    "slot_occupancy": (plot_slot_occupancy, ("slot_bins",)),
    "hot_keys": (plot_hot_keys, ("hot_keys",)),
    "collisions": (plot_collisions, ("collisions", "true_collisions")),
    "sizing": (plot_sizing, ("sizing",)),
    "topics": (plot_topics, ("topics",)),
}
_REQUIRED = {"entries_over_time": 1, "collisions": 1}  # leading tables that must be present


def render_figures(tables: dict, out_dir: str | os.PathLike | None = None, dpi: int = 100) -> dict[str, Figure]:
    """Every figure the given tables allow; with ``out_dir``, each also saved as ``<name>.png``."""
    figs: dict[str, Figure] = {}
    for name, (fn, needs) in FIGURES.items():
        required = _REQUIRED.get(name, len(needs))
        if any(tables.get(t) is None for t in needs[:required]):
            continue
        figs[name] = fn(*[tables.get(t) for t in needs])
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, fig in figs.items():
            with warnings.catch_warnings():
                # Keys may hold emoji or CJK the default font lacks: they draw as boxes, which is fine here.
                warnings.filterwarnings("ignore", message="Glyph .* missing from font")
                fig.savefig(out / f"{name}.png", dpi=dpi)
    return figs


__all__ = ["FIGURES", "LABEL_WIDTH", "plot_chain_histogram", "plot_collisions", "plot_entries_over_time", "plot_fill",
           "plot_hot_keys", "plot_queue_entries", "plot_sizing", "plot_slot_occupancy", "plot_topics", "readable",
           "readable_summary", "render_figures"]
