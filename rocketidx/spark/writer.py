"""The mapInArrow IndexFile writer: one shuffle partition's sorted entries -> IndexFiles + manifest rows.

In: a partition's Arrow batches of :data:`rocketidx.spark.sources.commitlog.SHUFFLE_ROWS` (core bundles plus info rows), sorted by
``(window nulls first, phy_offset)``: every split's info row first (the partitioner gives each writer
partition its own copy), then the bundles of each window it owns, window after window; bundles of a
window hold disjoint offset ranges, so that order is CommitLog order.
Out: the task's :class:`rocketidx.build.results.TaskResult` as one Arrow batch of
:data:`rocketidx.build.results.WRITER_ROWS`: its windows' files (what the driver validates before it
commits), from the partition holding copy 0 every split's :class:`RangeInfo`, and the worker's CPU time
and peak RSS.

Stays true:
* every partition resolves the same stops from the same info rows (:func:`resolve_stops`) and drops
  the entries the broker's recovery would never read (after the first final stop, after a blank), so
  no message is ever sent back to the driver;
* entries reach :func:`rocketidx.build.write.write_windows`, as in every build, in CommitLog order, one
  window at a time: memory is one slot table plus one batch, whatever the window's size;
* files go into a directory unique to the task attempt (``_tasks/p<partition>-t<attempt id>-<random>``
  under the staging version directory), so a retried or speculative attempt never touches another's
  files; on an output pyarrow.fs opens, each file is built on the executor's local disk and uploaded
  once closed, because HDFS and object stores cannot update a file in place.
"""
from __future__ import annotations

import uuid
from typing import Iterator

import numpy as np
import pyarrow as pa

from rocketidx.build.direct_task import WriterParams
from rocketidx.build.results import WRITER_ROWS, TaskResult, to_batch
from rocketidx.build.write import EntryBatch, write_windows
from rocketidx.output.local import TASKS_DIR

__all__ = ["WRITER_ROWS", "WriterParams", "write_partition"]


class _TaskDir:
    """The attempt's directory under the staging version, made when the first window starts (a partition
    that owns no window leaves nothing behind)."""

    def __init__(self, staging: str, task_dir: str):
        self.staging, self.task_dir, self.files = staging, task_dir, None

    @property
    def local(self) -> str:
        if self.files is None:
            from rocketidx.output.target import TaskFiles
            self.files = TaskFiles(self.staging, self.task_dir)
        return self.files.local

    def publish(self, names: list[str]) -> None:
        self.files.publish(names)


def write_partition(batches: Iterator[pa.RecordBatch], params: WriterParams) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function: write this partition's windows, yield the task's result."""
    import pyarrow.compute as pc
    from pyspark import TaskContext

    from rocketidx.commitlog.splits import RangeInfo, resolve_stops, skip_mask
    from rocketidx.errors import RocketIdxError
    from rocketidx.index.bundles import iter_bundles
    from rocketidx.spark.tasks import task_setup
    from rocketidx.process_cost import Usage

    task_setup()
    usage = Usage()
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx else 0
    attempt = ctx.taskAttemptId() if ctx else 0
    task_dir = f"{TASKS_DIR}/p{partition:05d}-t{attempt}-{uuid.uuid4().hex[:8]}"
    dest = _TaskDir(params.staging, task_dir)
    infos: dict[int, RangeInfo] = {}
    copies: set[int] = set()

    def entries() -> Iterator[EntryBatch]:
        skip = None
        for batch in batches:
            window = batch.column("window")
            if window.null_count:
                is_info = window.is_null()
                info_rows = batch.filter(is_info)
                for raw, copy in zip(info_rows.column("info").to_pylist(), info_rows.column("phy_offset").to_pylist()):
                    info = RangeInfo.from_json(raw)
                    infos[info.index] = info
                    copies.add(copy)
                batch = batch.filter(pc.invert(is_info))
                if batch.num_rows == 0:
                    continue
            if skip is None:
                # Info rows sort first, so every one of them has arrived by the first bundle.
                if len(infos) != params.num_ranges:
                    raise RocketIdxError(f"writer partition {partition} saw {len(infos)} of {params.num_ranges} "
                                         "split infos before its first entry; the shuffle lost rows")
                skip = resolve_stops(infos.values()).skip_intervals
            for bundle in iter_bundles(batch):
                keep = skip_mask(bundle.positions, skip) if skip else None
                if keep is not None:
                    if keep.all():
                        continue
                    keep = ~keep
                phy, kh, ts = bundle.entries(keep)
                yield EntryBatch(np.full(len(phy), bundle.window, np.int64), phy, kh, ts, bundle.entry_positions(keep))

    try:
        windows = list(write_windows(entries(), dest, params.sizes, max_open=1, ordered=True))
    except BaseException:
        if dest.files is not None:
            dest.files.discard()
        raise
    if dest.files is not None:
        dest.files.close()
    ranges = sorted(infos.values(), key=lambda i: i.index) if 0 in copies else []
    yield to_batch(TaskResult(partition, task_dir, None, windows, ranges).finish(usage))
