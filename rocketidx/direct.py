"""One task of a direct build: read a few windows' bytes, write those windows' IndexFiles, no shuffle.

In: a :class:`rocketidx.timeplan.DirectTask` (the windows it owns, the pieces of the log it reads, and
in a second pass single stray records of its windows found elsewhere), the read's
:class:`rocketidx.splits.SplitSpec`, the writer's :class:`WriterParams` and a task directory name.
Out: manifest rows like the shuffle writer's (:mod:`rocketidx.spark.writer`): one ``file`` row per
IndexFile, one ``window`` row per window, one ``range`` row per piece (its :class:`RangeInfo`, which
the driver resolves into the broker's stops), one ``strays`` row (positions and windows of entries
whose window another task owns) and a last ``task`` row (CPU time, peak RSS).

Stays true: entries reach the core :class:`rocketidx.build.WindowSet` in CommitLog order, so an owned
window's files are byte-identical to the in-process build's once no entry of it lies outside the
task's pieces (the driver reruns a task with its strays as ``extra`` pieces otherwise); memory is the
WindowSet's few slot tables plus one batch, however large a window is. Nothing here needs Spark.
"""
from __future__ import annotations

import resource

import numpy as np

from rocketidx import layout as L
from rocketidx.build import WindowSet
from rocketidx.config import BuildConfig
from rocketidx.output import TaskFiles
from rocketidx.splits import SplitSpec, read_split
from rocketidx.timeplan import DirectTask
from rocketidx.windows import assign_windows

# A task that finds more stray entries than this reports only the count: the driver then falls back
# to the shuffle build, which routes every entry (a log this far out of time order is not a clock step).
MAX_STRAYS = 200_000


def _usage() -> tuple[int, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1000), r.ru_maxrss


def run_task(task: DirectTask, spec: SplitSpec, params, task_dir: str, partition: int, *,
             report_ranges: bool = True) -> list[dict]:
    """Run one task; returns its manifest rows. ``params``: :class:`rocketidx.spark.writer.WriterParams`
    (staging location, sizes, window length). ``report_ranges=False`` on a rerun (the first pass's
    infos already count)."""
    cpu0, _ = _usage()
    dest = TaskFiles(params.staging, task_dir)
    config = BuildConfig(hash_slot_num=params.hash_slot_num, index_num=params.index_num,
                         window_ms=params.window_ms, timezone="UTC")
    windows = WindowSet(dest.local, config, max_open=2)
    owned = np.asarray(task.windows, np.int64)
    stray_pos: list[np.ndarray] = []
    stray_win: list[np.ndarray] = []
    n_strays = 0
    infos = []
    pieces = sorted([(p, True) for p in task.pieces] + [(p, False) for p in task.extra],
                    key=lambda x: x[0].segment.base_offset + x[0].start)
    try:
        for piece, counts in pieces:
            reading = read_split(piece, spec, entries=True)
            while True:
                try:
                    chunk = next(reading)
                except StopIteration as done:
                    info = done.value
                    break
                e = chunk.entries
                ts = e.column("store_timestamp_ms").to_numpy()
                phy = e.column("phy_offset").to_numpy()
                kh = e.column("key_hash").to_numpy()
                w = assign_windows(ts, params.window_ms)
                mine = np.isin(w, owned) if len(owned) > 1 else w == owned[0]
                if not mine.all():
                    if counts:
                        n_strays += int((~mine).sum())
                        if n_strays <= MAX_STRAYS:
                            stray_pos.append(phy[~mine])
                            stray_win.append(w[~mine])
                    w, phy, kh, ts = w[mine], phy[mine], kh[mine], ts[mine]
                windows.add(w, phy, kh, ts)
            if counts and report_ranges:
                infos.append(info)
        files = windows.close()
        dest.publish([f.name for f in files])
    except BaseException:
        windows.abort()
        dest.discard()
        raise
    dest.close()
    size = L.index_file_size(params.hash_slot_num, params.index_num)
    rows = [dict(f.as_row(), kind="file", partition=partition, task_dir=task_dir, seq=f.seq,
                 created_with_end_phy_offset=f.created_with_end_phy_offset,
                 created_with_end_timestamp=f.created_with_end_timestamp, size=size, entries=f.entries)
            for f in files]
    _, rss = _usage()
    for wr in windows.writers.values():
        rows.append({"kind": "window", "partition": partition, "task_dir": task_dir, "window_id": wr.window_id,
                         "window_start_ms": wr.window_id * params.window_ms, "entries": wr.entries,
                         "skipped_below_end": wr.skipped_below_end, "worker_rss_kb": rss})
    rows.extend({"kind": "range", "partition": partition, "info": i.to_json()} for i in infos)
    if n_strays:
        pos = np.concatenate(stray_pos) if n_strays <= MAX_STRAYS else np.zeros(0, np.int64)
        win = np.concatenate(stray_win) if n_strays <= MAX_STRAYS else np.zeros(0, np.int64)
        rows.append({"kind": "strays", "partition": partition, "task": task.index, "count": n_strays,
                     "positions": pos.astype(np.int64).tobytes(), "windows": win.astype(np.int64).tobytes()})
    cpu1, rss = _usage()
    rows.append({"kind": "task", "partition": partition, "task_dir": task_dir, "task": task.index,
                 "worker_rss_kb": rss, "cpu_ms": cpu1 - cpu0})
    return rows


def strays_of(rows: list[dict]) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """(positions, windows, count, complete) of the stray entries the tasks reported: record positions
    unique per window, the number of entries, and False when a task found too many to send."""
    got = [r for r in rows if r["kind"] == "strays"]
    count = sum(r["count"] for r in got)
    if not got:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 0, True
    pos = np.concatenate([np.frombuffer(r["positions"], np.int64) for r in got])
    win = np.concatenate([np.frombuffer(r["windows"], np.int64) for r in got])
    pairs = np.unique(np.stack([win, pos], axis=1), axis=0) if len(pos) else np.zeros((0, 2), np.int64)
    return pairs[:, 1], pairs[:, 0], count, len(pos) == count
