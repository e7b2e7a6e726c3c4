"""What a build's tasks hand the driver: :class:`TaskResult`, built here and nowhere else.

In: what a task wrote (:class:`rocketidx.build.write.WrittenWindow` per window), what its reads saw
(:class:`rocketidx.commitlog.splits.RangeInfo` per piece), in the direct plan the entries whose window another
task owns (:class:`Strays`) and the time index's blocks, and the task's CPU time and peak memory
(:class:`rocketidx.process_cost.Usage`). Out: a :class:`TaskResult`; on Spark's shuffle plan, which hands Arrow
batches back, the same result as :data:`WRITER_ROWS` (:func:`to_batch`, :func:`from_rows`).

Stays true: a result is small (a few numbers per window and per piece, never an entry), so collecting every
task's result on the driver costs nothing however large the log is.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from rocketidx.build.write import WrittenWindow
from rocketidx.commitlog.splits import RangeInfo
from rocketidx.errors import RocketIdxError
from rocketidx.index.reader import Header
from rocketidx.index.writer import FileInfo
from rocketidx.process_cost import Usage


@dataclass
class Strays:
    """Entries a direct task read whose window another task owns: their records' positions and windows
    (empty when there were more than the task may send; ``count`` is always the full number)."""

    count: int
    positions: np.ndarray
    windows: np.ndarray

    @property
    def complete(self) -> bool:
        return len(self.positions) == self.count


@dataclass
class TaskResult:
    """One task's report: where its files are (``task_dir``, under the staging version), its windows, what
    its reads saw, and what it cost. ``task``: the direct plan's task index (None in the shuffle plan)."""

    partition: int
    task_dir: str
    task: int | None = None
    windows: list[WrittenWindow] = field(default_factory=list)
    ranges: list[RangeInfo] = field(default_factory=list)
    strays: Strays | None = None
    blocks: list[dict] = field(default_factory=list)  # the time index's blocks (BlockCollector.to_rows)
    # With ConsumeQueues a target, what each piece the task counted dispatched (rocketidx.build.queues.ReadResult)
    queue_reads: list = field(default_factory=list)
    cpu_ms: int = 0
    worker_rss_kb: int = 0

    def finish(self, usage: Usage) -> "TaskResult":
        """This result with the task's CPU time and the process's peak memory now."""
        return replace(self, cpu_ms=usage.cpu_ms, worker_rss_kb=usage.peak_rss_kb)

    def without_files(self) -> "TaskResult":
        """What is left of a task whose windows were written again by a rerun: its reads and its cost."""
        return replace(self, windows=[])


def ranges_of(results: list[TaskResult]) -> list[RangeInfo]:
    return [i for r in results for i in r.ranges]


# --- the shuffle plan's Arrow form ------------------------------------------------------------------------

WRITER_ROWS = pa.schema([
    ("kind", pa.string()),  # file | window | range | task
    ("partition", pa.int32()),
    ("task_dir", pa.string()),  # relative to the staging directory
    ("name", pa.string()),  # staging name <window start 15 digits>_<seq 4 digits>
    ("window_id", pa.int64()),
    ("window_start_ms", pa.int64()),
    ("seq", pa.int32()),
    ("begin_timestamp", pa.int64()),
    ("end_timestamp", pa.int64()),
    ("begin_phy_offset", pa.int64()),
    ("end_phy_offset", pa.int64()),
    ("hash_slot_count", pa.int32()),
    ("index_count", pa.int32()),
    ("created_with_end_phy_offset", pa.int64()),
    ("created_with_end_timestamp", pa.int64()),
    ("entries", pa.int64()),
    ("skipped_below_end", pa.int64()),
    ("first_skipped_at", pa.int64()),  # window rows: CommitLog offset of the first record skipped, or null
    ("worker_rss_kb", pa.int64()),  # task rows: peak RSS of the Python worker
    ("cpu_ms", pa.int64()),  # task rows: CPU time the Python worker spent on this task
    ("info", pa.binary()),  # range rows: the RangeInfo as JSON
])


def to_batch(result: TaskResult) -> pa.RecordBatch:
    """A result as :data:`WRITER_ROWS` (what a mapInArrow function returns)."""
    common = {"partition": result.partition, "task_dir": result.task_dir}
    rows = []
    for w in result.windows:
        for f in w.files:
            h = f.header
            rows.append(dict(common, kind="file", name=f.name, window_id=f.window_id, window_start_ms=f.window_start_ms,
                             seq=f.seq, begin_timestamp=h.begin_timestamp, end_timestamp=h.end_timestamp,
                             begin_phy_offset=h.begin_phy_offset, end_phy_offset=h.end_phy_offset,
                             hash_slot_count=h.hash_slot_count, index_count=h.index_count,
                             created_with_end_phy_offset=f.created_with_end_phy_offset,
                             created_with_end_timestamp=f.created_with_end_timestamp))
        rows.append(dict(common, kind="window", window_id=w.window_id, window_start_ms=w.window_start_ms,
                         entries=w.entries, skipped_below_end=w.skipped_below_end,
                         first_skipped_at=w.first_skipped_at))
    rows += [dict(common, kind="range", info=i.to_json()) for i in result.ranges]
    rows.append(dict(common, kind="task", worker_rss_kb=result.worker_rss_kb, cpu_ms=result.cpu_ms))
    return pa.RecordBatch.from_pylist(rows, schema=WRITER_ROWS)


def from_rows(rows: list[dict]) -> list[TaskResult]:
    """The results :func:`to_batch` encoded, one per task attempt that reported (rows of a failed attempt
    never reach the driver: Spark keeps the rows of the attempt that succeeded)."""
    results: dict[str, TaskResult] = {}
    windows: dict[tuple[str, int], WrittenWindow] = {}
    files: list[dict] = []
    for r in rows:
        res = results.get(r["task_dir"])
        if res is None:
            res = results[r["task_dir"]] = TaskResult(r["partition"], r["task_dir"])
        kind = r["kind"]
        if kind == "window":
            w = WrittenWindow(r["window_id"], r["window_start_ms"], [], r["entries"], r["skipped_below_end"],
                              r["first_skipped_at"])
            windows[(r["task_dir"], w.window_id)] = w
            res.windows.append(w)
        elif kind == "file":
            files.append(r)
        elif kind == "range":
            res.ranges.append(RangeInfo.from_json(r["info"]))
        elif kind == "task":
            res.cpu_ms, res.worker_rss_kb = r["cpu_ms"], r["worker_rss_kb"]
    for r in files:
        w = windows.get((r["task_dir"], r["window_id"]))
        if w is None:
            raise RocketIdxError(f"{r['task_dir']}: file {r['name']} of window {r['window_id']} without its window's row")
        header = Header(r["begin_timestamp"], r["end_timestamp"], r["begin_phy_offset"], r["end_phy_offset"],
                        r["hash_slot_count"], r["index_count"])
        w.files.append(FileInfo(r["name"], r["window_id"], r["window_start_ms"], r["seq"], header,
                                r["created_with_end_phy_offset"], r["created_with_end_timestamp"]))
    for w in windows.values():
        w.files.sort(key=lambda f: f.seq)
    return list(results.values())
