"""The direct plan: tasks that each read a few windows' bytes and write those windows' IndexFiles.

In: a :class:`rocketidx.build.plan.DirectTask` (the windows it owns, the pieces of the log it reads, and
in a second pass single stray records of its windows found elsewhere), the read's
:class:`rocketidx.commitlog.splits.SplitSpec`, the writer's :class:`WriterParams` and a task directory name.
Out: a :class:`rocketidx.build.results.TaskResult`: the windows written (through
:func:`rocketidx.build.write.write_windows`, as every build writes), each piece's
:class:`rocketidx.commitlog.splits.RangeInfo` (which the driver resolves into the broker's stops), the
positions and windows of entries whose window another task owns, and the task's CPU time and peak RSS.

The driver side (:func:`run_direct`) plans the tasks (:mod:`rocketidx.build.plan`), runs them through a
``run_job`` callable (Spark's, or :func:`local_job` in this process), resolves the stops, reruns the
tasks that own strays, and :func:`rocketidx.build.finish.finish_build` validates and commits. The Spark
build and the in-process build's offset and time filters both go this way.

Stays true: entries reach the writers in CommitLog order, so an owned window's files are byte-identical to
the in-process build's once no entry of it lies outside the task's pieces (the driver reruns a task with
its strays as ``extra`` pieces otherwise); memory is two slot tables plus one batch, however large a window
is. Nothing here needs Spark.
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from rocketidx.arrays import numpy_of
from rocketidx.build.queues import finish_read, in_place_at
from rocketidx.build.plan import DirectTask, group_ranges, plan_windows, rerun_tasks, slice_tasks, task_count
from rocketidx.build.results import Strays, TaskResult, ranges_of
from rocketidx.build.write import EntryBatch, WriterSizes, write_windows
from rocketidx.commitlog.dispatch import dispatch
from rocketidx.commitlog.readers import read_split
from rocketidx.consumequeue.runs import SplitQueues
from rocketidx.commitlog.splits import FINAL_STOPS, RangeInfo, ResolvedStops, SplitSpec, resolve_stops
from rocketidx.commitlog.timeindex import DEFAULT_BLOCK_BYTES, BlockCollector, plan_slice
from rocketidx.config import LightQueues
from rocketidx.index.windows import assign_windows
from rocketidx.output.local import TASKS_DIR
from rocketidx.output.target import TaskFiles
import rocketidx.storage as storage
from rocketidx.process_cost import Usage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterParams:
    """What every writer task needs; small and picklable."""

    staging: str  # the version directory (local path, or URI): rocketidx.output.target.TaskFiles writes there
    hash_slot_num: int
    index_num: int
    window_ms: int
    num_ranges: int = 0  # shuffle plan: info rows each partition must see
    time_blocks: int = 0  # > 0: tasks also report the time index's blocks of this many bytes
    # Set: the pieces a task counts also feed the ConsumeQueues (delayed messages' delay table), one read for
    # both targets (rocketidx.build.queues.finish_read writes each piece's entries beside the task's files).
    queue_delays: tuple[int, ...] | None = None
    queue_light: LightQueues | None = None  # with queue_delays: the light queues' rules (None: none)
    queue_in_place: int = 0  # with queue_delays, > 0: the queue file size; clean runs are written in place too
    sync: bool = True  # False: tasks only start their IndexFiles' writeback; the driver syncs them (WriterSizes.sync)

    @property
    def sizes(self) -> WriterSizes:
        return WriterSizes(self.hash_slot_num, self.index_num, self.window_ms, self.sync)


# A task that finds more stray entries than this reports only the count: the driver then falls back
# to the shuffle build, which routes every entry (a log this far out of time order is not a clock step).
MAX_STRAYS = 200_000


class _StrayLog:
    """The entries a task read whose window another task owns: kept up to :data:`MAX_STRAYS`, counted always."""

    def __init__(self) -> None:
        self.count = 0
        self.positions: list[np.ndarray] = []
        self.windows: list[np.ndarray] = []

    def add(self, positions: np.ndarray, windows: np.ndarray) -> None:
        self.count += len(positions)
        if self.count <= MAX_STRAYS:
            self.positions.append(positions)
            self.windows.append(windows)

    def result(self) -> Strays | None:
        if not self.count:
            return None
        if self.count > MAX_STRAYS:
            return Strays(self.count, np.zeros(0, np.int64), np.zeros(0, np.int64))
        return Strays(self.count, np.concatenate(self.positions).astype(np.int64),
                      np.concatenate(self.windows).astype(np.int64))


def run_task(task: DirectTask, spec: SplitSpec, params: WriterParams, task_dir: str, partition: int, *,
             report_ranges: bool = True) -> TaskResult:
    """Run one task. ``report_ranges=False`` on a rerun (the first pass's infos already count). A piece
    whose reading ends for good (zero tail, invalid record) ends the task: nothing after it counts, as in
    the broker's recovery (a later task cannot know; the driver checks that none wrote what the stops drop)."""
    usage = Usage()
    dest = TaskFiles(params.staging, task_dir)
    owned = np.asarray(task.windows, np.int64)
    strays = _StrayLog()
    infos: list[RangeInfo] = []
    queue_reads: list = []
    blocks = BlockCollector(params.time_blocks) if params.time_blocks else None

    def entries() -> Iterator[EntryBatch]:
        pieces = sorted([(p, True) for p in task.pieces] + [(p, False) for p in task.extra],
                        key=lambda x: x[0].segment.base_offset + x[0].start)
        for piece, counts in pieces:
            reading = read_split(piece, spec, entries=True, on_records=blocks.add if blocks and counts else None)
            queues = SplitQueues(piece.index) if counts and report_ranges and params.queue_delays else None
            while True:
                try:
                    chunk = next(reading)
                except StopIteration as done:
                    info = done.value
                    break
                if queues is not None:
                    queues.add(chunk.segment, dispatch(chunk.buf, chunk.segment, chunk.recs, params.queue_delays,
                                                        params.queue_light))
                e = chunk.entries
                ts = numpy_of(e.column("store_timestamp_ms"))
                phy = numpy_of(e.column("phy_offset"))
                kh = numpy_of(e.column("key_hash"))
                at = chunk.positions  # records' offsets where a PHYSICALOFFSET field lies, else None
                w = assign_windows(ts, params.window_ms)
                mine = np.isin(w, owned) if len(owned) > 1 else w == owned[0]
                if not mine.all():
                    if counts:
                        strays.add((phy if at is None else at)[~mine], w[~mine])
                    w, phy, kh, ts = w[mine], phy[mine], kh[mine], ts[mine]
                    at = None if at is None else at[mine]
                yield EntryBatch(w, phy, kh, ts, at)
            if counts and report_ranges:
                infos.append(info)
            if queues is not None:
                queue_reads.append(finish_read(queues, info, dest, f"q{piece.index:05d}.units",
                                               in_place=in_place_at(params.staging, params.queue_in_place)))
            if counts and info.stop_kind in FINAL_STOPS:
                break

    try:
        windows = list(write_windows(entries(), dest, params.sizes, max_open=2))
    except BaseException:
        dest.discard()
        raise
    dest.close()
    return TaskResult(partition, task_dir, task.index, windows, infos, strays.result(),
                      blocks.to_rows() if blocks is not None else [], queue_reads=queue_reads).finish(usage)


def local_job(spec: SplitSpec, params: WriterParams) -> Callable[..., list[TaskResult]]:
    """A ``run_job`` for :func:`run_direct` that runs the tasks one after another in this process."""
    def run(tasks: list[DirectTask], what: str, report_ranges: bool = True) -> list[TaskResult]:
        return [run_task(t, spec, params, task_dir_name(t, "local"), 0, report_ranges=report_ranges) for t in tasks]
    return run


def task_dir_name(task: DirectTask, attempt) -> str:
    """Unique per attempt, so a retried or speculative attempt never touches another's files."""
    return f"{TASKS_DIR}/d{task.index:05d}-t{attempt}-{uuid.uuid4().hex[:8]}"


def strays_of(results: list[TaskResult]) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """(positions, windows, count, complete) of the stray entries the tasks reported: record positions
    unique per window, the number of entries, and False when a task found too many to send."""
    got = [r.strays for r in results if r.strays is not None]
    count = sum(s.count for s in got)
    if not got:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 0, True
    pos = np.concatenate([s.positions for s in got])
    win = np.concatenate([s.windows for s in got])
    pairs = np.unique(np.stack([win, pos], axis=1), axis=0) if len(pos) else np.zeros((0, 2), np.int64)
    return pairs[:, 1], pairs[:, 0], count, len(pos) == count


# --- the driver ---------------------------------------------------------------------------------------

# When the tasks that own strays (entries outside their task's bytes) hold more than this share of the
# log, the direct plan gives way: rereading them would cost more than routing every entry once.
MAX_RERUN_SHARE = 0.5


@dataclass
class DirectPlan:
    """The direct plan's tasks, and the :class:`RangeInfo` of bytes a time index let it skip."""

    tasks: list[DirectTask]
    skipped: list[RangeInfo]


def _whole_read(segments, spec: SplitSpec) -> bool:
    """Whether the read covers its segments from first byte to last (what a time index describes)."""
    return bool(segments) and spec.from_offset in (None, segments[0].base_offset) and \
        spec.to_offset in (None, segments[-1].end_offset) and not spec.skip_offsets and not spec.skip_entries \
        and not spec.whole_segments


def plan_tasks(segments, spec: SplitSpec, window_ms: int, wanted: int | None, cores: int, figures: dict,
               time_index: str | None = None) -> DirectPlan:
    """The direct plan's tasks (none when no record starts in the read); fills ``figures``.

    A time-bounded read of whole segments with a usable time index in ``time_index`` (see
    :mod:`rocketidx.commitlog.timeindex`) plans only the blocks whose store times meet the bounds.
    """
    t0 = time.monotonic()
    sliced = None
    if time_index and (spec.from_time_ms is not None or spec.to_time_ms is not None) and _whole_read(segments, spec):
        sliced, why = plan_slice(segments, time_index, spec.from_time_ms, spec.to_time_ms, spec.check_crc)
        figures["time_index"] = (f"{sliced.blocks_read} of {sliced.blocks} blocks" if sliced
                                 else f"not used: {why}")
        log.info("time index %s: %s", time_index, figures["time_index"])
    if sliced is not None:
        ranges = [r for p in sliced.pieces for r in plan_windows(segments, spec, window_ms, within=p)]
        tasks = slice_tasks(segments, ranges, task_count(ranges, spec.split_bytes, wanted, cores))
        skipped = sliced.skipped
    else:
        ranges = plan_windows(segments, spec, window_ms)
        tasks = group_ranges(segments, ranges, task_count(ranges, spec.split_bytes, wanted, cores)) if ranges else []
        skipped = []
    figures.update(ranges=len(ranges), tasks=len(tasks), plan_s=round(time.monotonic() - t0, 3), strays=0,
                   rerun_tasks=0)
    log.info("direct plan: %d windows' ranges -> %d tasks in %.3fs", len(ranges), len(tasks), figures["plan_s"])
    return DirectPlan(tasks, skipped)
def run_direct(plan: DirectPlan, segments, run_job: Callable[..., list[TaskResult]],
               figures: dict) -> tuple[list[TaskResult], ResolvedStops, int] | None:
    """Run the tasks (``run_job(tasks, what, report_ranges=...)`` -> results) and check what they wrote.

    Returns ``(results, resolved, pieces)``, or None when the direct plan cannot give the in-process bytes
    (the caller removes ``_tasks`` and builds another way): a read whose stops drop entries a later task
    already wrote, splits that disagree on record starts, more strays than :data:`MAX_STRAYS` in a
    task, tasks owning strays that hold more than :data:`MAX_RERUN_SHARE` of the bytes, or strays in a
    log whose PHYSICALOFFSET fields are not all their records' offsets (a stray is reread as a piece
    that starts at its record, found by that field). Fewer strays are rerouted by rerunning only the
    tasks that own their windows, with the stray records as extra pieces.
    """
    tasks = plan.tasks
    results = run_job(tasks, "direct")
    infos = ranges_of(results)
    resolved = resolve_stops(infos + plan.skipped)
    if resolved.chain_breaks or sum(i.entries for i in infos) != resolved.entries:
        log.info("the direct plan gives way: %s", "splits disagree on record starts" if resolved.chain_breaks
                 else "reading stops before the end of what the tasks wrote")
        return None
    positions, windows, count, complete = strays_of(results)
    if count and resolved.phy_mismatch:
        log.info("the direct plan gives way: entries out of time order in a log with PHYSICALOFFSET fields "
                 "out of place")
        return None
    if count:
        again = rerun_tasks(tasks, positions, windows, segments)
        share = sum(t.bytes for t in again) / max(1, sum(t.bytes for t in tasks))
        if not complete or share > MAX_RERUN_SHARE:
            log.info("the direct plan gives way: %d entries out of time order, in tasks holding %.0f%% of the "
                     "log", count, 100 * share)
            return None
        figures.update(strays=count, rerun_tasks=len(again))
        log.info("%d entries out of time order: rerunning %d of %d tasks with them", count, len(again), len(tasks))
        redone = {t.index for t in again}
        # The first pass's reads and costs still count; its windows of the rerun tasks are written again.
        results = [r.without_files() if r.task in redone else r for r in results]
        results += run_job(again, "direct, strays", report_ranges=False)
    return results, resolved, len(infos)


def collect_blocks(tdir: str | None, segments, spec: SplitSpec, plan: DirectPlan) -> int:
    """The block size the tasks should report (0: none): only a read of whole segments, all of them
    scanned, describes them completely."""
    if not tdir or plan.skipped or not _whole_read(segments, spec) or any(storage.is_remote(s.path) for s in segments):
        return 0
    return DEFAULT_BLOCK_BYTES
