"""Checking what a build's tasks wrote, and committing it: the last step of every plan.

In: the tasks' :class:`rocketidx.build.results.TaskResult` list, the stops resolved from their reads
(:class:`rocketidx.commitlog.splits.ResolvedStops`), the output and its staging version. Out: the committed
manifest, and the :class:`rocketidx.build.summary.BuildSummary` filled in.

Stays true: nothing is committed unless every window was written by exactly one task into files numbered
0..k-1, each rolled file full and seeded from its predecessor's end, every staged file is where its task
said with the size the sizes give, and the entries written plus those the broker's rule skipped add up to
the entries read; a log whose first record is invalid, and (for the commands) a range that selects no
message, commit nothing.
"""
from __future__ import annotations

import logging
import time

from rocketidx.build.log_record import KEY, record
from rocketidx.build.results import TaskResult, ranges_of
from rocketidx.build.summary import BuildSummary, manifest_header
from rocketidx.commitlog.native import reader_name, readers_of
from rocketidx.commitlog.records import STOP_RANGE_END
from rocketidx.commitlog.segments import Segment
from rocketidx.commitlog.splits import ResolvedStops
from rocketidx.commitlog.timeindex import BlockCollector, keep
from rocketidx.config import BuildConfig
from rocketidx.errors import CorruptRecordError, EmptySelectionError, RocketIdxError
from rocketidx.index.writer import FileInfo
import rocketidx.layout as L
from rocketidx.output.local import LocalOutput, Staging
from rocketidx.storage import sync_files as local_sync_files
from rocketidx.output.remote import RemoteOutput
import rocketidx.storage as storage

log = logging.getLogger(__name__)


def refuse_invalid_log(segments: list[Segment], stop: dict | None, start_offset: int | None = None) -> None:
    """A CommitLog whose very first record is invalid is not a log (random bytes, another file format):
    building an empty index from it would hide that, so it is an error and nothing is committed. A
    log that is merely empty (a zero tail from its first byte) builds an empty index."""
    if not segments or stop is None or stop["kind"] != "corrupt":
        return
    first = segments[0].base_offset if start_offset is None else start_offset
    if stop["phy_offset"] <= first:
        raise CorruptRecordError(segments[0].path, stop["segment_offset"],
                                 f"not one valid record: {stop['reason']}; nothing was built")


def validate(results: list[TaskResult], resolved: ResolvedStops, config: BuildConfig
             ) -> tuple[list[FileInfo], int, int]:
    """Check the tasks' results before anything is committed. Returns (files, windows, skipped).

    Each window was written by exactly one task, its files are numbered 0..k-1, every file but the
    last of a window is full, a rolled file was seeded from its predecessor's end, and the entries
    written add up to the entries read minus the ``buildIndex`` below-end skips.
    """
    by_window: dict[int, tuple[TaskResult, object]] = {}
    for r in results:
        for w in r.windows:
            if w.window_id in by_window:
                raise RocketIdxError(f"window {w.window_id} was written by two tasks "
                                     f"({by_window[w.window_id][0].task_dir}, {r.task_dir})")
            by_window[w.window_id] = (r, w)
    files: list[FileInfo] = []
    written = skipped = 0
    for wid in sorted(by_window):
        _, w = by_window[wid]
        skipped += w.skipped_below_end
        if not w.files and w.entries == 0:
            continue  # every entry of the window fell below endPhyOffset (buildIndex): no file, as in process
        if not w.files:
            raise RocketIdxError(f"window {wid}: files and window summary do not match")
        if [f.seq for f in w.files] != list(range(len(w.files))):
            raise RocketIdxError(f"window {wid}: files {[f.name for f in w.files]} are not one task's 0..k-1")
        prev = None
        for f in w.files:
            seed = (0, 0) if prev is None else (prev.end_phy_offset, prev.end_timestamp)
            if (f.created_with_end_phy_offset, f.created_with_end_timestamp) != seed:
                raise RocketIdxError(f"window {wid} file {f.seq}: not seeded from its predecessor's end")
            if prev is not None and prev.index_count != config.index_num:
                raise RocketIdxError(f"window {wid} file {f.seq - 1}: rolled over before it was full")
            if f.entries <= 0:
                raise RocketIdxError(f"window {wid} file {f.seq}: entries do not match its header")
            files.append(f)
            prev = f.header
        if sum(f.entries for f in w.files) != w.entries:
            raise RocketIdxError(f"window {wid}: files hold {sum(f.entries for f in w.files)} entries, "
                                 f"the writer put {w.entries}")
        written += w.entries
    if written + skipped != resolved.entries:
        raise RocketIdxError(f"entries read ({resolved.entries}) != written ({written}) + skipped below "
                             f"endPhyOffset ({skipped}): the writers lost or duplicated entries")
    return files, len({f.window_id for f in files}), skipped


def first_skipped(results: list[TaskResult]) -> int | None:
    """CommitLog offset of the first record whose entries a window's endPhyOffset skip left out."""
    return min((w.first_skipped_at for r in results for w in r.windows if w.first_skipped_at is not None),
               default=None)


def locate_files(output: LocalOutput | RemoteOutput, staging: Staging, results: list[TaskResult],
                 files: list[FileInfo], size: int) -> dict[str, str]:
    """Where each validated file is (staged name -> path in its task directory), after checking it is there
    with the size the build's sizes give. The commit moves each once, straight to its final name (a move on
    an object store copies the whole file); files of failed or speculative attempts that lost stay in
    ``_tasks``, which the commit removes."""
    task_of = {(w.window_id, f.seq): r.task_dir for r in results for w in r.windows for f in w.files}
    sources = {}
    for f in files:
        task_dir = task_of[(f.window_id, f.seq)]
        src = f"{staging.path}/{task_dir}/{f.name}"
        found = output.file_size(src)
        if found is None:
            raise FileNotFoundError(f"staged index file missing: {staging.where(task_dir, f.name)}")
        if found != size:
            raise RocketIdxError(f"{staging.where(task_dir, f.name)}: {found} bytes, expected {size}")
        sources[f.name] = src
    return sources


def keep_task_time_index(tdir: str | None, segments, results: list[TaskResult], block_bytes: int, summary: BuildSummary,
                    check_crc: bool) -> None:
    """Write the time index the tasks' blocks describe (:func:`rocketidx.commitlog.timeindex.keep`)."""
    if not tdir or not block_bytes:
        return
    collector = BlockCollector(block_bytes)
    collector.absorb([b for r in results for b in r.blocks])
    keep(tdir, segments, collector, summary.stops, check_crc)


def finish_build(output: LocalOutput | RemoteOutput, staging: Staging, results: list[TaskResult],
                 resolved: ResolvedStops, config: BuildConfig, segments, summary: BuildSummary, *, filters: dict,
                 name_after: str | None, t0: float, allow_empty: bool = True, queues: dict | None = None,
                 read_from: int | None = None, sync_files: bool = False) -> dict:
    """Validate the task results, fill ``summary`` from the resolved stops, and commit. Returns the manifest.

    ``queues``: the manifest's ``consumequeues`` (:func:`rocketidx.build.queues.build_queues`), when they
    are a target: their files are already in ``staging``.
    ``filters``: the read's offset and time bounds (recorded in the manifest when any is set, so an
    unfiltered build's manifest equals the in-process one). ``allow_empty=False``: a range that selected
    no message raises :class:`EmptySelectionError` instead of committing an empty index (the commands'
    rule; a library caller may want the empty build). ``read_from``: where reading began when that is not a
    filter the manifest records (the one-pass build of a backfill's tail): the bytes read count from there.
    ``sync_files``: the writers left the IndexFiles' syncs to this step (local staging; ``WriterSizes.sync``).
    """
    from_offset = filters.get("from_offset") if filters.get("from_offset") is not None else read_from
    if resolved.stop and resolved.stop["kind"] == "corrupt":
        log.info("reading stopped for good at %s + %d (offset %d): %s; nothing after it is indexed",
                 resolved.stop["segment"], resolved.stop["segment_offset"], resolved.stop["phy_offset"],
                 resolved.stop["reason"])
    refuse_invalid_log(segments, resolved.stop, from_offset)
    if not allow_empty:
        refuse_empty_selection(segments, resolved.messages, filters)
    files, windows, skipped = validate(results, resolved, config)
    sources = locate_files(output, staging, results, files, L.index_file_size(config.hash_slot_num, config.index_num))
    if sync_files:  # durable before the commit can name them, as a writer that syncs leaves them
        local_sync_files(sources.values())
    # An offset range covers its own bytes, not the whole segments it lies in (a range build said "bytes
    # 12,891,238" for a range of 10,000,000): the summary's and the manifest's bytes_read are those.
    summary.bytes_read = covered_bytes(resolved.stops, from_offset, filters.get("to_offset"))
    summary.messages = resolved.messages
    summary.messages_indexed = resolved.indexed
    summary.rollback_skipped = resolved.rollback
    summary.below_end_phy_offset_skipped = skipped
    summary.below_end_first_offset = first_skipped(results)
    summary.entries = resolved.entries - skipped
    summary.windows = windows
    summary.files = len(files)
    summary.stop = resolved.stop
    # A build that read nothing (a time index skipped every byte) says what this process would have run.
    summary.reader = readers_of(i.reader for r in results for i in r.ranges) or reader_name()
    summary.stops = list(resolved.stops)
    if resolved.phy_mismatch:
        path, offset = resolved.phy_mismatch[0]
        summary.phy_mismatch = {"segment": str(path).rstrip("/").rsplit("/", 1)[-1], "segment_offset": offset}
    # What the readers went through: each counted range from its start to where it stopped or ended
    # (ranges tile the log, so a whole read scans bytes_read; a time index's slice, less).
    # A range whose last record runs past its end and stops reading for good there (a zero tail or an
    # invalid record, peeked at) scanned up to that stop, as the sequential reader does.
    summary.bytes_scanned = sum(max(0, (min(i.stop_offset, i.end) if i.stop_kind == STOP_RANGE_END
                                        else i.stop_offset) - i.start) for i in ranges_of(results)
                                if i.index in resolved.included)
    summary.wall_s = round(time.monotonic() - t0, 3)
    manifest = manifest_header(config, segments, summary)
    kept = {k: v for k, v in filters.items() if v is not None}
    if kept:
        manifest["filters"] = kept
    if queues is not None:
        manifest["consumequeues"] = summary.consumequeue = queues
    if not kept and read_from is None and name_after is None and resolved.stops:
        rec = record(config, segments, list(resolved.stops))
        if rec is not None:
            manifest[KEY] = rec
    return output.commit(staging, files, manifest, config.tzinfo, name_after=name_after, sources=sources)


def covered_bytes(stops, from_offset: int | None, to_offset: int | None) -> int:
    """The log's bytes a read covered: in each segment read (``stops``, one per segment, as
    :func:`rocketidx.commitlog.splits.resolve_stops` lists them), from its start or ``from_offset`` to
    where reading stopped or ``to_offset``, whichever comes first. Without bounds: every segment read,
    from its start to its stop (the whole log up to a zero tail)."""
    lo = 0 if from_offset is None else from_offset
    hi = 2**63 - 1 if to_offset is None else to_offset
    return sum(max(0, min(s["phy_offset"], hi) - max(s["phy_offset"] - s["segment_offset"], lo)) for s in stops)


def refuse_empty_selection(segments, messages: int, filters: dict) -> None:
    """A range that selected no message commits nothing: an empty index put in place of an earlier build
    would look like a build and hide the mistake (a range past the log's end, a time before it began)."""
    kept = {k: filters.get(k) for k in ("from_offset", "to_offset", "from_time_ms", "to_time_ms")
            if filters.get(k) is not None}
    if kept and messages == 0:
        where = storage.redact(segments[0].path).rsplit("/", 1)[0] if segments else "the CommitLog"
        raise EmptySelectionError(where, "the range " + ", ".join(f"{k}={v}" for k, v in kept.items()) +
                                  " selects no message of this log; nothing was committed")
