"""The mapInArrow IndexFile writer: one shuffle partition's sorted entries -> IndexFiles + manifest rows.

In: a partition's Arrow batches of :data:`rocketidx.spark.source.SHUFFLE_ROWS` (core bundles plus info rows), sorted by
``(window nulls first, phy_offset)``: every split's info row first (the partitioner gives each writer
partition its own copy), then the bundles of each window it owns, window after window; bundles of a
window hold disjoint offset ranges, so that order is CommitLog order.
Out: Arrow batches of :data:`WRITER_ROWS`: one ``file`` row per IndexFile written (the manifest row the
driver validates before it commits), one ``window`` row per window (entries, below-end skips and where
the first was), from the
partition holding copy 0 one ``range`` row per split (its :class:`RangeInfo`), and a last ``task`` row
(the worker's CPU time and peak RSS).

Stays true:
* every partition resolves the same stops from the same info rows (:func:`resolve_stops`) and drops
  the entries the broker's recovery would never read (after the first final stop, after a blank), so
  no message is ever sent back to the driver;
* entries reach the core :class:`WindowWriter` in CommitLog order, one window at a time: memory is one
  slot table plus one batch, whatever the window's size;
* files go into a directory unique to the task attempt (``_tasks/p<partition>-t<attempt id>-<random>``
  under the staging version directory), so a retried or speculative attempt never touches another's
  files; on an output pyarrow.fs opens, each file is built on the executor's local disk and uploaded
  once closed, because HDFS and object stores cannot update a file in place.
"""
from __future__ import annotations

import uuid
from typing import Iterator

import pyarrow as pa

from rocketidx.direct import WriterParams
from rocketidx.output import TASKS_DIR


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
    ("size", pa.int64()),
    ("entries", pa.int64()),
    ("skipped_below_end", pa.int64()),
    ("first_skipped_at", pa.int64()),  # window rows: CommitLog offset of the first record skipped, or null
    ("worker_rss_kb", pa.int64()),  # window and task rows: peak RSS of the Python worker so far
    ("cpu_ms", pa.int64()),  # task rows: CPU time the Python worker spent on this task
    ("info", pa.binary()),
])


def _rows(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=WRITER_ROWS)


def write_partition(batches: Iterator[pa.RecordBatch], params: WriterParams) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function: write this partition's windows, yield the manifest rows."""
    import resource

    import pyarrow.compute as pc
    from pyspark import TaskContext

    from rocketidx import layout as L
    from rocketidx.errors import RocketIdxError
    from rocketidx.indexfile import WindowWriter
    from rocketidx.output import TaskFiles
    from rocketidx.bundles import iter_bundles
    from rocketidx.spark.tasks import task_setup
    from rocketidx.splits import RangeInfo, resolve_stops, skip_mask

    task_setup()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx else 0
    attempt = ctx.taskAttemptId() if ctx else 0
    task_dir = f"{TASKS_DIR}/p{partition:05d}-t{attempt}-{uuid.uuid4().hex[:8]}"
    dest = None
    infos: dict[int, RangeInfo] = {}
    copies: set[int] = set()
    skip = None
    writer: WindowWriter | None = None
    done_windows: set[int] = set()
    size = L.index_file_size(params.hash_slot_num, params.index_num)

    def finish(w: WindowWriter) -> pa.RecordBatch:
        files = w.close()
        dest.publish([f.name for f in files])
        rows = [dict(f.as_row(), kind="file", partition=partition, task_dir=task_dir, seq=f.seq,
                     created_with_end_phy_offset=f.created_with_end_phy_offset,
                     created_with_end_timestamp=f.created_with_end_timestamp, size=size, entries=f.entries)
                for f in files]
        rows.append({"kind": "window", "partition": partition, "task_dir": task_dir, "window_id": w.window_id,
                     "window_start_ms": w.window_id * params.window_ms, "entries": w.entries,
                     "skipped_below_end": w.skipped_below_end, "first_skipped_at": w.first_skipped_at,
                     "worker_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})
        return _rows(rows)

    try:
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
                wid = bundle.window
                if writer is None or writer.window_id != wid:
                    if writer is not None:
                        done_windows.add(writer.window_id)
                        yield finish(writer)
                        writer = None
                    if wid in done_windows or (done_windows and wid < max(done_windows)):
                        raise RocketIdxError(f"writer partition {partition}: window {wid} arrived out of order; "
                                             "bundles must be sorted by (window, phy_offset)")
                    if dest is None:
                        dest = TaskFiles(params.staging, task_dir)
                    writer = WindowWriter(dest.local, wid, params.window_ms, params.hash_slot_num,
                                          params.index_num)
                writer.add(*bundle.entries(keep), bundle.entry_positions(keep))
        if writer is not None:
            yield finish(writer)
            writer = None
        if 0 in copies:
            yield _rows([{"kind": "range", "partition": partition, "info": i.to_json()}
                         for i in sorted(infos.values(), key=lambda i: i.index)])
        usage = resource.getrusage(resource.RUSAGE_SELF)
        yield _rows([{"kind": "task", "partition": partition, "task_dir": task_dir, "worker_rss_kb": usage.ru_maxrss,
                      "cpu_ms": int((usage.ru_utime + usage.ru_stime - cpu0) * 1000)}])
    except BaseException:
        if writer is not None:
            writer.abort()
        if dest is not None:
            dest.discard()
        raise
    if dest is not None:
        dest.close()
