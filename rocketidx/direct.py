"""The direct build: tasks that each read a few windows' bytes and write those windows' IndexFiles.

In: a :class:`rocketidx.timeplan.DirectTask` (the windows it owns, the pieces of the log it reads, and
in a second pass single stray records of its windows found elsewhere), the read's
:class:`rocketidx.splits.SplitSpec`, the writer's :class:`WriterParams` and a task directory name.
Out: manifest rows like the shuffle writer's (:mod:`rocketidx.spark.writer`): one ``file`` row per
IndexFile, one ``window`` row per window, one ``range`` row per piece (its :class:`RangeInfo`, which
the driver resolves into the broker's stops), one ``strays`` row (positions and windows of entries
whose window another task owns) and a last ``task`` row (CPU time, peak RSS).

The driver side (:func:`run_direct`) plans the tasks (:mod:`rocketidx.timeplan`), runs them through a
``run_job`` callable (Spark's, or :func:`local_job` in this process), resolves the stops, reruns the
tasks that own strays, and :func:`finish_build` validates the rows and commits. The Spark build and the
in-process build's offset and time filters both go this way.

Stays true: entries reach the core :class:`rocketidx.build.WindowSet` in CommitLog order, so an owned
window's files are byte-identical to the in-process build's once no entry of it lies outside the
task's pieces (the driver reruns a task with its strays as ``extra`` pieces otherwise); memory is the
WindowSet's few slot tables plus one batch, however large a window is. Nothing here needs Spark.
"""
from __future__ import annotations

import logging
import os
import resource
import time
import uuid
from dataclasses import dataclass
from typing import Callable

import numpy as np

from rocketidx import layout as L
from rocketidx import storage
from rocketidx.build import BuildSummary, WindowSet, manifest_header, refuse_invalid_log
from rocketidx.config import BuildConfig
from rocketidx.errors import EmptySelectionError, RocketIdxError
from rocketidx.indexfile import FileInfo, Header
from rocketidx.segments import list_segments
from rocketidx.output import TASKS_DIR, LocalOutput, RemoteOutput, Staging, TaskFiles, built_here
from rocketidx.messages import STOP_RANGE_END
from rocketidx.splits import FINAL_STOPS, RangeInfo, ResolvedStops, SplitSpec, read_split, resolve_stops
from rocketidx.timeindex import AUTO, DEFAULT_BLOCK_BYTES, BlockCollector, default_dir, keep, plan_slice
from rocketidx.timeplan import DirectTask, group_ranges, plan_windows, rerun_tasks, slice_tasks, task_count
from rocketidx.windows import assign_windows

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class WriterParams:
    """What every writer task needs; small and picklable."""

    staging: str  # the version directory (local path, or URI): rocketidx.output.TaskFiles writes there
    hash_slot_num: int
    index_num: int
    window_ms: int
    num_ranges: int = 0  # shuffle plan: info rows each partition must see
    time_blocks: int = 0  # > 0: tasks also report the time index's blocks of this many bytes


# A task that finds more stray entries than this reports only the count: the driver then falls back
# to the shuffle build, which routes every entry (a log this far out of time order is not a clock step).
MAX_STRAYS = 200_000


def _usage() -> tuple[int, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1000), r.ru_maxrss


def run_task(task: DirectTask, spec: SplitSpec, params, task_dir: str, partition: int, *,
             report_ranges: bool = True) -> list[dict]:
    """Run one task; returns its manifest rows. ``params``: staging location, sizes, window length.
    ``report_ranges=False`` on a rerun (the first pass's infos already count). A piece whose reading
    ends for good (zero tail, invalid record) ends the task: nothing after it counts, as in the broker's
    recovery (a later task cannot know; the driver checks that none wrote what the stops drop)."""
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
    blocks = BlockCollector(params.time_blocks) if params.time_blocks else None
    try:
        for piece, counts in pieces:
            reading = read_split(piece, spec, entries=True, on_records=blocks.add if blocks and counts else None)
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
                at = chunk.positions  # records' offsets where a PHYSICALOFFSET field lies, else None
                w = assign_windows(ts, params.window_ms)
                mine = np.isin(w, owned) if len(owned) > 1 else w == owned[0]
                if not mine.all():
                    if counts:
                        n_strays += int((~mine).sum())
                        if n_strays <= MAX_STRAYS:
                            stray_pos.append((phy if at is None else at)[~mine])
                            stray_win.append(w[~mine])
                    w, phy, kh, ts = w[mine], phy[mine], kh[mine], ts[mine]
                    at = None if at is None else at[mine]
                windows.add(w, phy, kh, ts, at)
            if counts and report_ranges:
                infos.append(info)
            if counts and info.stop_kind in FINAL_STOPS:
                break
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
                         "skipped_below_end": wr.skipped_below_end, "first_skipped_at": wr.first_skipped_at,
                         "worker_rss_kb": rss})
    rows.extend({"kind": "range", "partition": partition, "info": i.to_json()} for i in infos)
    if n_strays:
        pos = np.concatenate(stray_pos) if n_strays <= MAX_STRAYS else np.zeros(0, np.int64)
        win = np.concatenate(stray_win) if n_strays <= MAX_STRAYS else np.zeros(0, np.int64)
        rows.append({"kind": "strays", "partition": partition, "task": task.index, "count": n_strays,
                     "positions": pos.astype(np.int64).tobytes(), "windows": win.astype(np.int64).tobytes()})
    if blocks is not None:
        rows.extend(blocks.to_rows())
    cpu1, rss = _usage()
    rows.append({"kind": "task", "partition": partition, "task_dir": task_dir, "task": task.index,
                 "worker_rss_kb": rss, "cpu_ms": cpu1 - cpu0})
    return rows


def local_job(spec: SplitSpec, params: WriterParams) -> Callable[..., list[dict]]:
    """A ``run_job`` for :func:`run_direct` that runs the tasks one after another in this process."""
    def run(tasks: list[DirectTask], what: str, report_ranges: bool = True) -> list[dict]:
        return [row for t in tasks for row in run_task(t, spec, params, task_dir_name(t, "local"), 0,
                                                       report_ranges=report_ranges)]
    return run


def task_dir_name(task: DirectTask, attempt) -> str:
    """Unique per attempt, so a retried or speculative attempt never touches another's files."""
    return f"{TASKS_DIR}/d{task.index:05d}-t{attempt}-{uuid.uuid4().hex[:8]}"


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
    :mod:`rocketidx.timeindex`) plans only the blocks whose store times meet the bounds.
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


def run_direct(plan: DirectPlan, segments, run_job: Callable[..., list[dict]],
               figures: dict) -> tuple[list[dict], ResolvedStops, int] | None:
    """Run the tasks (``run_job(tasks, what, report_ranges=...)`` -> rows) and check what they wrote.

    Returns ``(rows, resolved, pieces)``, or None when the direct plan cannot give the in-process bytes
    (the caller removes ``_tasks`` and builds another way): a read whose stops drop entries a later task
    already wrote, splits that disagree on record starts, more strays than :data:`MAX_STRAYS` in a
    task, tasks owning strays that hold more than :data:`MAX_RERUN_SHARE` of the bytes, or strays in a
    log whose PHYSICALOFFSET fields are not all their records' offsets (a stray is reread as a piece
    that starts at its record, found by that field). Fewer strays are rerouted by rerunning only the
    tasks that own their windows, with the stray records as extra pieces.
    """
    tasks = plan.tasks
    rows = run_job(tasks, "direct")
    infos = [RangeInfo.from_json(r["info"]) for r in rows if r["kind"] == "range"]
    resolved = resolve_stops(infos + plan.skipped)
    if resolved.chain_breaks or sum(i.entries for i in infos) != resolved.entries:
        log.info("the direct plan gives way: %s", "splits disagree on record starts" if resolved.chain_breaks
                 else "reading stops before the end of what the tasks wrote")
        return None
    positions, windows, count, complete = strays_of(rows)
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
        stale = {r["task_dir"] for r in rows if r["kind"] == "task" and r["task"] in redone}
        rows = [r for r in rows if r.get("task_dir") not in stale or r["kind"] == "task"]
        rows += run_job(again, "direct, strays", report_ranges=False)
    return rows, resolved, len(infos)


def validate(rows: list[dict], resolved: ResolvedStops, config: BuildConfig):
    """Check the writers' manifest rows before anything is committed. Returns (files, windows, skipped).

    Each window was written by exactly one task, its files are numbered 0..k-1, every file but the
    last of a window is full, a rolled file was seeded from its predecessor's end, and the entries
    written add up to the entries read minus the ``buildIndex`` below-end skips.
    """
    window_rows = [r for r in rows if r["kind"] == "window"]
    by_window: dict[int, dict] = {}
    for r in window_rows:
        if r["window_id"] in by_window:
            raise RocketIdxError(f"window {r['window_id']} was written by two tasks "
                                 f"({by_window[r['window_id']]['task_dir']}, {r['task_dir']})")
        by_window[r["window_id"]] = r
    files_by_window: dict[int, list[dict]] = {}
    for r in rows:
        if r["kind"] == "file":
            files_by_window.setdefault(r["window_id"], []).append(r)
    files: list[FileInfo] = []
    written = 0
    for wid in sorted(set(files_by_window) | set(by_window)):
        wrow = by_window.get(wid)
        frows = sorted(files_by_window.get(wid, []), key=lambda r: r["seq"])
        if wrow is not None and not frows and wrow["entries"] == 0:
            continue  # every entry of the window fell below endPhyOffset (buildIndex): no file, as in process
        if wrow is None or not frows:
            raise RocketIdxError(f"window {wid}: files and window summary do not match")
        if [r["seq"] for r in frows] != list(range(len(frows))) or {r["task_dir"] for r in frows} != {wrow["task_dir"]}:
            raise RocketIdxError(f"window {wid}: files {[r['name'] for r in frows]} are not one task's 0..k-1")
        prev = None
        for r in frows:
            header = Header(r["begin_timestamp"], r["end_timestamp"], r["begin_phy_offset"], r["end_phy_offset"],
                            r["hash_slot_count"], r["index_count"])
            seed = (0, 0) if prev is None else (prev.end_phy_offset, prev.end_timestamp)
            if (r["created_with_end_phy_offset"], r["created_with_end_timestamp"]) != seed:
                raise RocketIdxError(f"window {wid} file {r['seq']}: not seeded from its predecessor's end")
            if prev is not None and prev.index_count != config.index_num:
                raise RocketIdxError(f"window {wid} file {r['seq'] - 1}: rolled over before it was full")
            if r["entries"] != header.index_count - 1 or r["entries"] <= 0:
                raise RocketIdxError(f"window {wid} file {r['seq']}: entries do not match its header")
            files.append(FileInfo(r["name"], wid, r["window_start_ms"], r["seq"], header,
                                  r["created_with_end_phy_offset"], r["created_with_end_timestamp"]))
            prev = header
        if sum(r["entries"] for r in frows) != wrow["entries"]:
            raise RocketIdxError(f"window {wid}: files hold {sum(r['entries'] for r in frows)} entries, "
                                 f"the writer put {wrow['entries']}")
        written += wrow["entries"]
    skipped = sum(r["skipped_below_end"] for r in window_rows)
    if written + skipped != resolved.entries:
        raise RocketIdxError(f"entries read ({resolved.entries}) != written ({written}) + skipped below "
                             f"endPhyOffset ({skipped}): the writers lost or duplicated entries")
    return files, len({f.window_id for f in files}), skipped


def first_skipped(rows: list[dict]) -> int | None:
    """CommitLog offset of the first record whose entries a window's endPhyOffset skip left out."""
    return min((r["first_skipped_at"] for r in rows if r["kind"] == "window" and r.get("first_skipped_at")
                is not None), default=None)



def locate_files(output: LocalOutput | RemoteOutput, staging: Staging, rows: list[dict], files) -> dict[str, str]:
    """Where each validated file is (staged name -> path in its task directory), after checking it is there
    with the size its writer reported. The commit moves each once, straight to its final name (a move on
    an object store copies the whole file); files of failed or speculative attempts that lost stay in
    ``_tasks``, which the commit removes."""
    task_of = {(r["window_id"], r["seq"]): (r["task_dir"], r["size"]) for r in rows if r["kind"] == "file"}
    sources = {}
    for f in files:
        task_dir, size = task_of[(f.window_id, f.seq)]
        src = f"{staging.path}/{task_dir}/{f.name}"
        found = output.file_size(src)
        if found is None:
            raise FileNotFoundError(f"staged index file missing: {staging.where(task_dir, f.name)}")
        if found != size:
            raise RocketIdxError(f"{staging.where(task_dir, f.name)}: {found} bytes, expected {size}")
        sources[f.name] = src
    return sources


def time_index_dir(time_index: str | None, out) -> str | None:
    """``AUTO``: ``OUT/_timeindex`` for a local output (none for a URI); None: no time index."""
    return default_dir(out) if time_index == AUTO else (str(time_index) if time_index else None)


def collect_blocks(tdir: str | None, segments, spec: SplitSpec, plan: DirectPlan) -> int:
    """The block size the tasks should report (0: none): only a read of whole segments, all of them
    scanned, describes them completely."""
    if not tdir or plan.skipped or not _whole_read(segments, spec) or any(storage.is_remote(s.path) for s in segments):
        return 0
    return DEFAULT_BLOCK_BYTES


def keep_time_index(tdir: str | None, segments, rows: list[dict], block_bytes: int, summary: BuildSummary,
                    check_crc: bool) -> None:
    """Write the time index the tasks' rows describe (:func:`rocketidx.timeindex.keep`)."""
    if not tdir or not block_bytes:
        return
    collector = BlockCollector(block_bytes)
    collector.absorb(rows)
    keep(tdir, segments, collector, summary.stops, check_crc)


def finish_build(output: LocalOutput | RemoteOutput, staging: Staging, rows: list[dict], resolved: ResolvedStops,
                 config: BuildConfig, segments, summary: BuildSummary, *, filters: dict, name_after: str | None,
                 t0: float, allow_empty: bool = True) -> dict:
    """Validate the task rows, fill ``summary`` from the resolved stops, and commit. Returns the manifest.

    ``filters``: the read's offset and time bounds (recorded in the manifest when any is set, so an
    unfiltered build's manifest equals the in-process one). ``allow_empty=False``: a range that selected
    no message raises :class:`EmptySelectionError` instead of committing an empty index (the commands'
    rule; a library caller may want the empty build).
    """
    if resolved.stop and resolved.stop["kind"] == "corrupt":
        log.info("reading stopped for good at %s + %d (offset %d): %s; nothing after it is indexed",
                 resolved.stop["segment"], resolved.stop["segment_offset"], resolved.stop["phy_offset"],
                 resolved.stop["reason"])
    refuse_invalid_log(segments, resolved.stop, filters.get("from_offset"))
    if not allow_empty:
        refuse_empty_selection(segments, resolved.messages, filters)
    files, windows, skipped = validate(rows, resolved, config)
    sources = locate_files(output, staging, rows, files)
    summary.bytes_read = resolved.bytes_read
    summary.messages = resolved.messages
    summary.messages_indexed = resolved.indexed
    summary.rollback_skipped = resolved.rollback
    summary.below_end_phy_offset_skipped = skipped
    summary.below_end_first_offset = first_skipped(rows)
    summary.entries = resolved.entries - skipped
    summary.windows = windows
    summary.files = len(files)
    summary.stop = resolved.stop
    summary.stops = list(resolved.stops)
    if resolved.phy_mismatch:
        path, offset = resolved.phy_mismatch[0]
        summary.phy_mismatch = {"segment": str(path).rstrip("/").rsplit("/", 1)[-1], "segment_offset": offset}
    # What the readers went through: each counted range from its start to where it stopped or ended
    # (ranges tile the log, so a whole read scans bytes_read; a time index's slice, less).
    infos = [RangeInfo.from_json(r["info"]) for r in rows if r["kind"] == "range"]
    # A range whose last record runs past its end and stops reading for good there (a zero tail or an
    # invalid record, peeked at) scanned up to that stop, as the sequential reader does.
    summary.bytes_scanned = sum(max(0, (min(i.stop_offset, i.end) if i.stop_kind == STOP_RANGE_END
                                        else i.stop_offset) - i.start) for i in infos
                                if i.index in resolved.included)
    summary.wall_s = round(time.monotonic() - t0, 3)
    manifest = manifest_header(config, segments, summary)
    kept = {k: v for k, v in filters.items() if v is not None}
    if kept:
        manifest["filters"] = kept
    return output.commit(staging, files, manifest, config.tzinfo, name_after=name_after, sources=sources)


def refuse_empty_selection(segments, messages: int, filters: dict) -> None:
    """A range that selected no message commits nothing: an empty index put in place of an earlier build
    would look like a build and hide the mistake (a range past the log's end, a time before it began)."""
    kept = {k: filters.get(k) for k in ("from_offset", "to_offset", "from_time_ms", "to_time_ms")
            if filters.get(k) is not None}
    if kept and messages == 0:
        where = storage.redact(segments[0].path).rsplit("/", 1)[0] if segments else "the CommitLog"
        raise EmptySelectionError(where, "the range " + ", ".join(f"{k}={v}" for k, v in kept.items()) +
                                  " selects no message of this log; nothing was committed")


def build_index_range(commitlog: str | os.PathLike, out: str | os.PathLike, config: BuildConfig = BuildConfig(), *,
                      from_offset: int | None = None, to_offset: int | None = None, from_time_ms: int | None = None,
                      to_time_ms: int | None = None, time_index: str | None = AUTO,
                      allow_empty: bool = True) -> tuple[dict, BuildSummary]:
    """The in-process build of an offset or time range: the Spark build's direct plan run as one task here.

    Same files, manifest (``filters`` included) and summary as ``build_index_spark`` with the same
    bounds; :func:`rocketidx.build.build_index` is the unfiltered reference, this is its filtered twin.
    ``time_index``: the time index directory to use and keep (:func:`time_index_dir`). A URI output is
    built in local scratch space and published (:func:`rocketidx.output.built_here`). ``allow_empty``: as
    :func:`finish_build`.
    """
    remote = storage.is_remote(out)
    with built_here(out) as target:
        return _build_range_at(commitlog, target, config, from_offset=from_offset, to_offset=to_offset,
                               from_time_ms=from_time_ms, to_time_ms=to_time_ms,
                               time_index=None if remote else time_index, allow_empty=allow_empty)


def _build_range_at(commitlog, out: str, config: BuildConfig, *, from_offset, to_offset, from_time_ms, to_time_ms,
                    time_index, allow_empty) -> tuple[dict, BuildSummary]:
    t0 = time.monotonic()
    commitlog = str(commitlog)
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
            # One task owns every window: no strays, no resync.
            plan = plan_tasks(segments, spec, config.window_ms, 1, 1, figures, time_index=tdir)
            params = WriterParams(staging.uri, config.hash_slot_num, config.index_num, config.window_ms,
                                  time_blocks=collect_blocks(tdir, segments, spec, plan))
            ran = run_direct(plan, segments, local_job(spec, params), figures) if plan.tasks else \
                ([], resolve_stops(plan.skipped), 0)
            if ran is None:
                raise RocketIdxError(f"{commitlog}: reading one piece per segment disagreed with the record chain")
            rows, resolved, _ = ran
            manifest = finish_build(output, staging, rows, resolved, config, segments, summary, filters=filters,
                                    name_after=None, t0=t0, allow_empty=allow_empty)
        except BaseException:
            output.discard(staging)
            raise
        summary.time_index = figures.get("time_index")
        keep_time_index(tdir, segments, rows, params.time_blocks, summary, config.check_crc)
    return manifest, summary
