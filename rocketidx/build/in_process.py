"""The in-process builds: CommitLog directory -> committed index output, in one Python process.

In: a CommitLog (or store) directory, a :class:`BuildConfig`, and for :func:`build_index_range` offset or
time bounds. Out: ``OUT/index/<files>``, ``OUT/_manifest.json`` and a
:class:`rocketidx.build.summary.BuildSummary`.

:func:`build_index` reads the whole log (or a backfill's tail) in one pass; :func:`build_index_range` runs
the direct plan (:mod:`rocketidx.build.direct_task`) as one task here, as Spark runs it as many. Both write
through :func:`rocketidx.build.write.write_windows`, as every build does.
Stays true: the files equal what RocketMQ's ``IndexFile`` writes for each window's entries in CommitLog
order; batches stream through, so memory is a few windows' slot tables plus one batch, however large a
window is (windows beyond ``max_open`` are suspended to disk and resumed when needed).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from typing import Iterator

import numpy as np

from rocketidx.arrays import arrow, numpy_of
from rocketidx.build.direct_task import WriterParams, collect_blocks, plan_tasks, run_direct
from rocketidx.build.pool import pool_job, pool_reads, pool_writes
from rocketidx.build.queues import build_queues, place_queues, remove_queue_files
from rocketidx.build.results import TaskResult, ranges_of
from rocketidx.build.finish import finish_build, keep_task_time_index, refuse_invalid_log
from rocketidx.build.summary import BuildSummary
from rocketidx.build.write import EntryBatch, WriterSizes, write_windows
from rocketidx.commitlog.dispatch import delay_levels_ms, dispatch, topics_of
from rocketidx.consumequeue.batch import BATCH_DIR, BatchQueueWriter, dispatch_batch
from rocketidx.commitlog.native import reader_name
from rocketidx.commitlog.entries import entry_positions, first_entries_mask, rollback_count
from rocketidx.commitlog.readers import CommitLogReader, first_misplaced
from rocketidx.commitlog.segments import Segment, list_segments
from rocketidx.commitlog.splits import RangeInfo, ResolvedStops, SplitSpec, resolve_stops
from rocketidx.commitlog.timeindex import AUTO, DEFAULT_BLOCK_BYTES, BlockCollector
from rocketidx.commitlog.timeindex import keep as keep_time_index
from rocketidx.config import BuildConfig, time_index_dir
from rocketidx.consumequeue.writer import ConsumeQueueWriter
from rocketidx.errors import RocketIdxError
from rocketidx.index.windows import assign_windows
from rocketidx.output.local import TASKS_DIR, LocalOutput
from rocketidx.output.manifest import CONSUMEQUEUE_DIR, INDEX_DIR
from rocketidx.output.target import built_here
import rocketidx.storage as storage

log = logging.getLogger(__name__)


def build_index(commitlog: str | os.PathLike, out: str | os.PathLike, config: BuildConfig = BuildConfig(),
                *, segments: list[Segment] | None = None, progress=None, native: bool | None = None,
                start_offset: int | None = None, skip_entries: int = 0, name_after: str | None = None,
                time_index: str | None = AUTO, workers: int = 1) -> tuple[dict, BuildSummary]:
    """Build and commit the index of a CommitLog. Returns (manifest, summary).

    ``commitlog`` and ``out``: local paths or URIs (a URI output is built in local scratch space and
    published there: :func:`rocketidx.output.target.built_here`). ``start_offset``: read from the first record
    at or after this absolute offset (a backfill's range); ``skip_entries``: drop the first entries of the
    message at ``start_offset`` (already indexed in the file the range continues); ``name_after``: every
    file name must sort after this one. ``workers`` > 1: the log is read by that many processes, each a share of
    the windows (:func:`build_index_range`'s plan, unbounded: the same files), where the build is a whole log's
    without batch consume queues; otherwise, and with one worker, one pass here.
    """
    if workers > 1 and start_offset is None and not skip_entries and name_after is None and not config.batch_queues:
        return build_index_range(commitlog, out, config, time_index=time_index, workers=workers, segments=segments,
                                 progress=progress)
    remote = storage.is_remote(out)
    if remote or start_offset is not None:
        config.refuse_batch_queues("a remote output" if remote else "a backfill's range")
    with built_here(out) as target:
        return _build_index_at(commitlog, target, config, segments=segments, progress=progress, native=native,
                               start_offset=start_offset, skip_entries=skip_entries, name_after=name_after,
                               time_index=None if remote else time_index)


def _build_index_at(commitlog, out: str, config: BuildConfig, *, segments, progress, native, start_offset,
                    skip_entries, name_after, time_index) -> tuple[dict, BuildSummary]:
    t0 = time.monotonic()
    segments = segments if segments is not None else list_segments(commitlog, from_offset=start_offset)
    summary = BuildSummary(segments=len(segments))
    output = LocalOutput(out)
    tdir = time_index_dir(time_index, out)
    with output.lock():
        staging = output.new_staging()
        try:
            blocks = BlockCollector(DEFAULT_BLOCK_BYTES) if tdir and start_offset is None and not skip_entries \
                else None
            reader = CommitLogReader(segments, check_crc=config.check_crc, batch_records=config.batch_records,
                                     native=native, start_offset=start_offset,
                                     on_records=blocks.add if blocks else None)
            # The files are synced together before the commit (finish_build), the disk writing while we read.
            sizes = WriterSizes(config.hash_slot_num, config.index_num, config.window_ms, sync=False)
            queues = ConsumeQueueWriter(os.path.join(staging.path, CONSUMEQUEUE_DIR), config.queue_file_size) \
                if config.consumequeue else None
            batches = BatchQueueWriter(os.path.join(staging.path, BATCH_DIR), config.batch_file_size) \
                if config.consumequeue and config.batch_topics else None
            windows = list(write_windows(_entries(reader, summary, config, start_offset, skip_entries, progress, queues,
                                                  batches),
                                         os.path.join(staging.path, INDEX_DIR), sizes, max_open=4))
            # Before the queues are closed: a log whose first record is invalid leaves no queue file either.
            refuse_invalid_log(segments, reader.stop.as_dict() if reader.stop else None, start_offset)
            queue_manifest = None if queues is None else _queues_manifest(queues, config, segments, batches)
            # One task whose files are in staging's index/, and one read per segment: the same finish as every
            # other plan checks, counts and commits them.
            task = TaskResult(0, INDEX_DIR, windows=windows, ranges=_ranges_read(reader, segments, start_offset, native))
            manifest = finish_build(output, staging, [task], _resolved(reader, summary, segments), config, segments,
                                    summary, filters={}, name_after=name_after, t0=t0, queues=queue_manifest,
                                    read_from=start_offset, sync_files=True)
        except BaseException:
            output.discard(staging)
            raise
        keep_time_index(tdir, segments, blocks, summary.stops, config.check_crc)
    return manifest, summary


def _ranges_read(reader: CommitLogReader, segments: list[Segment], start_offset: int | None,
                 native: bool | None) -> list[RangeInfo]:
    """What the one pass read of each segment, as a task's pieces report it: from its start (or
    ``start_offset``) to its stop. ``first`` stays None: the one reader followed the record chain itself, so
    there is no resynchronised piece for :func:`rocketidx.commitlog.splits.resolve_stops` to check."""
    size = {s.base_offset: s.size for s in segments}
    return [RangeInfo(i, st.path, st.base_offset, size[st.base_offset], max(0, (start_offset or 0) - st.base_offset),
                      size[st.base_offset], None, st.segment_offset, st.kind, st.reason, reader=reader_name(native))
            for i, st in enumerate(reader.stops)]


def _resolved(reader: CommitLogReader, summary: BuildSummary, segments: list[Segment]) -> ResolvedStops:
    """The one pass's read as the stops of a split read resolve (:class:`ResolvedStops`): the counters
    :func:`_entries` kept in ``summary``, the reader's stops."""
    stops = tuple(s.as_dict() for s in reader.stops)
    size = {s.base_offset: s.size for s in segments}
    misplaced = summary.phy_mismatch
    path = {s.name: s.path for s in segments}
    return ResolvedStops(
        cut=reader.stop.phy_offset if reader.stop and reader.stop.final else None,
        blanks=tuple((s.phy_offset, s.base_offset + size[s.base_offset]) for s in reader.stops if s.kind == "blank"),
        included=frozenset(range(len(stops))), stops=stops, stop=reader.stop.as_dict() if reader.stop else None,
        bytes_read=reader.bytes_read, segments_read=reader.segments_read, messages=summary.messages,
        rollback=summary.rollback_skipped, indexed=summary.messages_indexed, entries=summary.entries,
        phy_mismatch=((path[misplaced["segment"]], misplaced["segment_offset"]),) if misplaced else ())


def _entries(reader: CommitLogReader, summary: BuildSummary, config: BuildConfig, start_offset: int | None,
             skip_entries: int, progress, queues: ConsumeQueueWriter | None,
             batches: BatchQueueWriter | None = None) -> Iterator[EntryBatch]:
    """The log's entries as :func:`write_windows` takes them, counting messages and entries into ``summary``;
    with ``queues``, each chunk's records are dispatched to the ConsumeQueues too (one read feeds both), and
    with ``batches`` those of the BatchCQ topics to their batch consume queues instead."""
    delays = delay_levels_ms(config.delay_levels)
    batch_topics = frozenset(config.batch_topics)
    chunks = reader.entry_chunks() if config.index else ((seg, buf, recs, None) for seg, buf, recs in
                                                         reader.record_chunks())
    for seg, buf, recs, entries in chunks:
        summary.messages += len(recs)
        if summary.phy_mismatch is None:
            summary.phy_mismatch = first_misplaced(seg, recs)
        named = topics_of(np.frombuffer(buf, np.uint8, seg.size), recs) if batches is not None else None
        if queues is not None:
            queues.add(seg, dispatch(buf, seg, recs, delays, config.light_queues, batch_topics, named))
        if batches is not None:  # the same records' topics, found once for both
            batches.add(seg, dispatch_batch(buf, seg, recs, batch_topics, named))
        summary.rollback_skipped += rollback_count(recs)
        if entries is not None:
            positions = entry_positions(buf, seg, recs, entries)
            drop = first_entries_mask(entries, start_offset, skip_entries, positions)
            if drop is not None:
                entries = entries.filter(arrow(~drop))
                positions = None if positions is None else positions[~drop]
            summary.messages_indexed += int(np.count_nonzero(numpy_of(entries.column("entry_seq")) == 0))
            ts = numpy_of(entries.column("store_timestamp_ms"))
            yield EntryBatch(assign_windows(ts, config.window_ms), numpy_of(entries.column("phy_offset")),
                             numpy_of(entries.column("key_hash")), ts, positions)
            summary.entries += entries.num_rows
        if progress:
            progress(reader)


def _queues_manifest(queues: ConsumeQueueWriter, config: BuildConfig, segments: list[Segment],
                     batches: BatchQueueWriter | None = None) -> dict:
    """The manifest's ``consumequeues``: the file size, the CommitLog's first offset (what a restarted broker's
    lookups depend on), and every queue written; with ``batches``, the batch consume queues (``batch``)."""
    written = queues.close()
    out = {"file_size": config.queue_file_size, "commitlog_min_offset": segments[0].base_offset if segments else 0,
           "queues": [q.as_dict() for q in written], "entries": sum(q.entries for q in written),
           "files": sum(len(q.files) for q in written), "dropped": dict(queues.dropped), "gaps": queues.gaps}
    if batches is not None:
        made = batches.close()
        out["batch"] = {"file_size": config.batch_file_size, "topics": list(config.batch_topics),
                        "queues": [q.as_dict() for q in made], "units": sum(q.units for q in made),
                        "files": sum(len(q.files) for q in made), "skipped": batches.skipped}
    return out


def build_index_range(commitlog: str | os.PathLike, out: str | os.PathLike, config: BuildConfig = BuildConfig(), *,
                      from_offset: int | None = None, to_offset: int | None = None, from_time_ms: int | None = None,
                      to_time_ms: int | None = None, time_index: str | None = AUTO,
                      allow_empty: bool = True, workers: int = 1,
                      segments: list[Segment] | None = None, progress=None) -> tuple[dict, BuildSummary]:
    """The in-process build of an offset or time range: the Spark build's direct plan run as one task here.

    Same files, manifest (``filters`` included) and summary as ``build_index_spark`` with the same
    bounds; :func:`rocketidx.build.in_process.build_index` is the unfiltered reference, this is its filtered twin.
    ``time_index``: the time index directory to use and keep (:func:`rocketidx.config.time_index_dir`). A URI output is
    built in local scratch space and published (:func:`rocketidx.output.target.built_here`). ``allow_empty``: as
    :func:`finish_build`. ``workers``: processes that run the plan's tasks (:mod:`rocketidx.build.pool`); with
    one, one task owns every window and runs here. ``segments``: the listing, where the caller has it;
    ``progress``: called as each task finishes (as :func:`build_index`'s, with the bytes its tasks read).
    """
    config.refuse_batch_queues("a range")
    remote = storage.is_remote(out)
    with built_here(out) as target:
        return _build_range_at(commitlog, target, config, from_offset=from_offset, to_offset=to_offset,
                               from_time_ms=from_time_ms, to_time_ms=to_time_ms,
                               time_index=None if remote else time_index, allow_empty=allow_empty,
                               workers=workers, segments=segments, progress=progress)


def _build_range_at(commitlog, out: str, config: BuildConfig, *, from_offset, to_offset, from_time_ms, to_time_ms,
                    time_index, allow_empty, workers: int = 1, segments=None,
                    progress=None) -> tuple[dict, BuildSummary]:
    t0 = time.monotonic()
    commitlog = str(commitlog)
    if segments is None:
        segments = list_segments(commitlog, from_offset=from_offset, to_offset=to_offset)
    end = to_offset if to_offset is not None else (segments[-1].end_offset if segments else 0)
    spec = SplitSpec(from_offset=from_offset, to_offset=end, from_time_ms=from_time_ms, to_time_ms=to_time_ms,
                     check_crc=config.check_crc, batch_records=config.batch_records)
    filters = {"from_offset": from_offset, "to_offset": to_offset, "from_time_ms": from_time_ms,
               "to_time_ms": to_time_ms}
    summary = BuildSummary(segments=len(segments))
    output = LocalOutput(str(out))
    tdir = time_index_dir(time_index, out)
    with output.lock():
        staging = output.new_staging()
        try:
            figures: dict = {}
            params = WriterParams(staging.uri, config.hash_slot_num, config.index_num, config.window_ms,
                                  queue_delays=delay_levels_ms(config.delay_levels) if config.consumequeue else None,
                                  queue_light=config.light_queues,
                                  # Local staging: the tasks write clean queue runs in place (no copy afterwards).
                                  queue_in_place=config.queue_file_size if config.consumequeue else 0,
                                  sync=False)  # the driver syncs the IndexFiles before the commit (finish_build)
            ran = None
            if config.index:
                # One worker: one task owns every window (no strays, no resync). More: at least a task each.
                plan = plan_tasks(segments, spec, config.window_ms, 1 if workers <= 1 else None, workers, figures,
                                  time_index=tdir)
                params = replace(params, time_blocks=collect_blocks(tdir, segments, spec, plan))
                ran = run_direct(plan, segments, pool_job(spec, params, workers, progress), figures) if plan.tasks else \
                    ([], resolve_stops(plan.skipped), 0)
                if ran is None and len(plan.tasks) > 1:
                    # The tasks' pieces could not give the one-pass bytes (strays past what a rerun takes, a stop
                    # that drops what a later task wrote): one task owning every window reads the log instead.
                    log.info("the direct plan gave way on %d tasks; one task reads the log", len(plan.tasks))
                    output.remove(f"{staging.path}/{TASKS_DIR}")
                    remove_queue_files(staging.path)
                    plan = plan_tasks(segments, spec, config.window_ms, 1, 1, figures, time_index=tdir)
                    params = replace(params, time_blocks=collect_blocks(tdir, segments, spec, plan))
                    ran = run_direct(plan, segments, pool_job(spec, params, 1, progress), figures)
                if ran is None:
                    raise RocketIdxError(f"{commitlog}: reading one piece per segment disagreed with the record chain")
            # A range's queues: what a broker fed only this range writes (docs/formats.md, where an entry lands:
            # step 3 blank-fills each first file); with the index, from the same read.
            queues = None
            if config.consumequeue and ran is not None:
                results, resolved, _ = ran
                queues = place_queues(segments, [q for r in results for q in r.queue_reads], ranges_of(results),
                                      resolved, config.queue_file_size, staging.path,
                                      run_writes=pool_writes(workers), write_tasks=workers, in_place=True)
            elif config.consumequeue:
                queues = build_queues(segments, spec, config.queue_file_size, delay_levels_ms(config.delay_levels),
                                      staging.path, light_queues=config.light_queues, run_reads=pool_reads(workers),
                                      run_writes=pool_writes(workers), write_tasks=workers, in_place=True)
                ran = [TaskResult(0, "", ranges=queues.infos)], queues.resolved, queues.splits
            results, resolved, _ = ran
            manifest = finish_build(output, staging, results, resolved, config, segments, summary, filters=filters,
                                    name_after=None, t0=t0, allow_empty=allow_empty,
                                    queues=None if queues is None else queues.manifest, sync_files=True)
        except BaseException:
            output.discard(staging)
            raise
        summary.time_index = figures.get("time_index")
        keep_task_time_index(tdir, segments, results, params.time_blocks, summary, config.check_crc)
    return manifest, summary
