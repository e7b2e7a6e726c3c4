"""The split-wise ConsumeQueue build: splits read in parallel, runs placed on the driver, files written in parallel.

In: the CommitLog's segments, the read's :class:`rocketidx.commitlog.splits.SplitSpec`, the queue file size
and delay table, the staging version directory (a URI, or a local or mounted path every task sees: a
relative one is made absolute on the driver), and two ``run_*``
callables that run a list of tasks and return their results (Spark's, or :func:`local_reads` and
:func:`local_writes` here).
Out: ``STAGING/consumequeue/<topic>/<queueId>/<files>``, and a :class:`QueuesBuilt`: the manifest's
``consumequeues`` value, the stops the reads resolve to, and the reads' :class:`RangeInfo`.

The steps (:mod:`rocketidx.consumequeue.runs` holds their core):
1. read: one task per split dispatches its records, writes their units to a piece file under ``_tasks``
   and returns its runs (a few numbers per queue and split);
2. the driver resolves the stops (a split after the log's end counts for nothing, as in the broker's
   recovery) and places the counted runs queue by queue, in CommitLog order;
3. write: tasks each write a share of the queue files, balanced by bytes.

Stays true: the files equal the in-process build's (:class:`rocketidx.consumequeue.writer.ConsumeQueueWriter`)
for the same records, at any split size; no task and not the driver ever holds a whole queue; a topic that
cannot be a directory name fails the build, naming the first such record the broker would have read.
"""
from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import pyarrow as pa

from rocketidx.commitlog.dispatch import dispatch
from rocketidx.config import LightQueues
from rocketidx.commitlog.readers import read_split
from rocketidx.commitlog.segments import Segment, SegmentRange
from rocketidx.commitlog.splits import RangeInfo, ResolvedStops, SplitSpec, plan_splits, resolve_stops
from rocketidx.consumequeue.writer import QueueInfo
from rocketidx.arrays import numpy_of
from rocketidx.consumequeue.placement import CONSECUTIVE
from rocketidx.consumequeue.runs import (RUN_ROWS, BadTopic, FilePlan, InPlace, SplitQueues, read_piece_ends, settle,
                                         write_file)
from rocketidx.errors import RocketIdxError
from rocketidx.output.local import TASKS_DIR, fsync_dir
from rocketidx.output.manifest import CONSUMEQUEUE_DIR
from rocketidx.output.remote import RemoteOutput
from rocketidx.output.target import TaskFiles, scratch_dir
import rocketidx.storage as storage
from rocketidx.process_cost import Usage

log = logging.getLogger(__name__)


@dataclass
class ReadResult:
    """What one split's read hands the driver: its info, its runs (Arrow IPC bytes: small, picklable), the
    records with a negative QUEUEOFFSET, the first topic that cannot be a directory, and its cost."""

    split: int
    info: RangeInfo
    runs: bytes
    negative: int
    bad_topic: BadTopic | None
    cpu_ms: int = 0
    worker_rss_kb: int = 0
    left_out: dict | None = None  # light-queue units the rules left out, by reason (None: no light queues)

    def table(self) -> pa.Table:
        return pa.ipc.open_stream(self.runs).read_all()


@dataclass(frozen=True)
class ReadParams:
    """What every read task needs; small and picklable."""

    staging: str  # the version directory: pieces go under its _tasks/
    spec: SplitSpec
    delays_ms: tuple[int, ...]
    light_queues: LightQueues | None = None
    in_place: int = 0  # > 0: the queue file size, and each read writes its consecutive runs in place too (InPlace)


def read_task(split: SegmentRange, params: ReadParams, attempt="local") -> ReadResult:
    """Read one split: dispatch its records, write their units to a piece of its own, return the runs."""
    usage = Usage()
    task_dir = f"{TASKS_DIR}/q{split.index:05d}-t{attempt}-{uuid.uuid4().hex[:8]}"
    files = TaskFiles(params.staging, task_dir)
    queues = SplitQueues(split.index)
    reading = read_split(split, params.spec)
    while True:
        try:
            chunk = next(reading)
        except StopIteration as done:
            info: RangeInfo = done.value
            break
        queues.add(chunk.segment, dispatch(chunk.buf, chunk.segment, chunk.recs, params.delays_ms,
                                           params.light_queues))
    try:
        return finish_read(queues, info, files, "units", usage, in_place_at(params.staging, params.in_place))
    finally:
        files.close()


def in_place_at(staging: str, file_size: int) -> InPlace | None:
    """Where reads also write their consecutive runs (``file_size`` > 0 and a local staging version), or None."""
    if not file_size or storage.is_remote(staging):
        return None
    return InPlace(os.path.join(staging, CONSUMEQUEUE_DIR), file_size)


def finish_read(queues: SplitQueues, info: RangeInfo, files: TaskFiles, name: str, usage: Usage | None = None,
                in_place: InPlace | None = None) -> ReadResult:
    """A split's gathered queues -> its piece file (``name`` among the task's ``files``, published to the
    staging version: uploaded where that is a URI) and its result; with ``in_place``, each consecutive run's
    units in its queue file too. The index's direct tasks call it too, for the pieces they read (one read
    feeds both)."""
    runs = queues.finish(os.path.join(files.local, name), f"{files.task_dir}/{name}", in_place)
    if runs.num_rows:
        files.publish([name])
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, RUN_ROWS) as w:
        w.write_table(runs)
    return ReadResult(queues.split, info, sink.getvalue(), queues.negative, queues.bad_topic,
                      usage.cpu_ms if usage else 0, usage.peak_rss_kb if usage else 0, queues.left_out or None)


def write_task(plans: list[FilePlan], staging: str, file_size: int, sync: bool = True) -> dict:
    """Write a share of the queue files; returns the files written and the task's cost. On a URI each file is
    made in local scratch space and uploaded whole (object stores cannot write a file in place)."""
    usage = Usage()
    if not storage.is_remote(staging):
        for plan in plans:
            write_file(os.path.join(staging, CONSUMEQUEUE_DIR), staging, plan, file_size, sync)
    else:
        remote = RemoteOutput.from_uri(staging)
        scratch = tempfile.mkdtemp(prefix="rocketidx-cq-", dir=scratch_dir())
        try:
            for plan in plans:
                write_file(scratch, staging, plan, file_size)
                local = os.path.join(scratch, plan.path)
                with open(local, "rb") as src, remote.fs.open_output_stream(
                        remote.path(CONSUMEQUEUE_DIR, plan.path)) as dst:
                    shutil.copyfileobj(src, dst, 8 * 1024**2)
                os.unlink(local)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return {"files": len(plans), "cpu_ms": usage.cpu_ms, "worker_rss_kb": usage.peak_rss_kb}


def local_reads(splits: list[SegmentRange], params: ReadParams) -> list[ReadResult]:
    """:func:`build_queues`' ``run_reads`` in this process: the splits one after another."""
    return [read_task(s, params) for s in splits]


def local_writes(groups: list[list[FilePlan]], staging: str, file_size: int, sync: bool = True) -> list[dict]:
    """:func:`build_queues`' ``run_writes`` in this process."""
    return [write_task(g, staging, file_size, sync) for g in groups]


@dataclass
class QueuesBuilt:
    """:func:`build_queues`' answer."""

    manifest: dict  # the manifest's "consumequeues"
    queues: list[QueueInfo]  # the same queues, sorted by topic and queue id
    resolved: ResolvedStops
    infos: list[RangeInfo]
    reads: list[ReadResult]
    writes: list[dict]
    splits: int


def share_files(files: list[FilePlan], tasks: int) -> list[list[FilePlan]]:
    """The files in ``tasks`` groups of about equal bytes (largest first, each to the lightest group)."""
    groups: list[list[FilePlan]] = [[] for _ in range(max(1, min(tasks, len(files))))]
    load = [0] * len(groups)
    for f in sorted(files, key=lambda f: -f.bytes):
        i = load.index(min(load))
        groups[i].append(f)
        load[i] += f.bytes + 1
    return [g for g in groups if g]


def build_queues(segments: list[Segment], spec: SplitSpec, file_size: int, delays_ms: tuple[int, ...],
                 staging: str, *,
                 run_reads: Callable[[list[SegmentRange], ReadParams], list[ReadResult]] = local_reads,
                 run_writes: Callable[[list[list[FilePlan]], str, int], list[dict]] = local_writes,
                 write_tasks: int = 1, sync: bool = True, light_queues: LightQueues | None = None,
                 in_place: bool = False) -> QueuesBuilt:
    """Build the ConsumeQueues of the read ``spec`` describes into ``staging/consumequeue`` (see the module
    docstring), in files of ``file_size`` bytes, delayed messages' tagsCode from ``delays_ms``, with
    ``light_queues`` the light queues too:
    ``run_reads(splits, params)`` runs :func:`read_task` on each split, ``run_writes(groups, staging,
    file_size, sync)`` :func:`write_task` on each group of file plans. ``sync=False``: a scratch rebuild
    (verify's), whose files no one keeps, skips the fsyncs. ``in_place``: the reads write clean runs in place
    (local staging only; :class:`rocketidx.consumequeue.runs.InPlace`)."""
    staging = _for_tasks(staging)
    params = ReadParams(staging, spec, tuple(delays_ms), light_queues, file_size if in_place else 0)
    for _ in range(2):
        splits = plan_splits(segments, params.spec)
        reads = run_reads(splits, params) if splits else []
        resolved = resolve_stops([r.info for r in reads])
        if not resolved.chain_breaks:
            break
        log.info("splits disagree on where records start (%s); rereading those segments as one split",
                 "; ".join(map(str, resolved.chain_breaks)))
        _remove_pieces(staging)
        remove_queue_files(staging)
        params = replace(params, spec=replace(params.spec, whole_segments=resolved.whole_segments(
            params.spec.whole_segments)))
    else:
        raise RocketIdxError(f"split chain still broken after rereading whole segments: {resolved.chain_breaks}")
    return place_queues(segments, reads, [r.info for r in reads], resolved, file_size, staging,
                        run_writes=run_writes, write_tasks=write_tasks, splits=len(splits), sync=sync,
                        in_place=in_place_at(staging, params.in_place) is not None)


def place_queues(segments: list[Segment], reads: list[ReadResult], infos: list[RangeInfo], resolved: ResolvedStops,
                 file_size: int, staging: str, *, run_writes: Callable[[list[list[FilePlan]], str, int], list[dict]] = local_writes,
                 write_tasks: int = 1, splits: int | None = None, sync: bool = True,
                 in_place: bool = False) -> QueuesBuilt:
    """Steps 2 and 3: place the counted reads' runs and write the files. ``reads`` may come from any plan whose
    pieces tile the read (the index's direct tasks hand theirs over): every counted piece of ``infos`` (what
    the stops were resolved from) that kept a record must be among them. ``in_place``: the reads wrote their
    consecutive runs in place too; what :func:`settle` cannot keep of that is removed and written anew."""
    staging = _for_tasks(staging)
    counted = sorted((r for r in reads if r.split in resolved.included), key=lambda r: r.split)
    have = {r.split for r in counted}
    if len(have) != len(counted):
        raise RocketIdxError("two reads of the same piece reached the ConsumeQueue writer")
    missing = sorted(i.index for i in infos if i.index in resolved.included and i.records and i.index not in have)
    if missing:
        raise RocketIdxError(f"pieces {missing[:5]} were read but their ConsumeQueue entries did not reach the driver")
    bad = next((r.bad_topic for r in counted if r.bad_topic is not None), None)
    if bad is not None:
        raise bad.error()
    runs = pa.concat_tables([r.table() for r in counted]) if counted else RUN_ROWS.empty_table()
    written = _written_in_place(reads) if in_place else {}
    dirty = frozenset(q for q, splits in written.items() if not splits <= resolved.included)
    settled = settle(runs, file_size, read_piece_ends(staging), in_place, dirty)
    for topic, queue in sorted(set(written) - settled.in_place):  # written anew below, or no queue at all
        shutil.rmtree(os.path.join(staging, CONSUMEQUEUE_DIR, topic, str(queue)), ignore_errors=True)
    for topic in sorted({t for t, _ in written}):
        _remove_if_empty(os.path.join(staging, CONSUMEQUEUE_DIR, topic))
    groups = share_files(settled.files, write_tasks)
    writes = run_writes(groups, staging, file_size, sync) if groups else []
    if sum(w["files"] for w in writes) != len(settled.files):
        raise RocketIdxError(f"the writers wrote {sum(w['files'] for w in writes)} of {len(settled.files)} queue files")
    if sync and not storage.is_remote(staging):  # a store's PUT is its durability; a file's name, its directory's
        _sync_dirs(os.path.join(staging, CONSUMEQUEUE_DIR), settled)
    queues = sorted(settled.queues, key=lambda q: (q.topic, q.queue_id))
    manifest = {"file_size": file_size,
                "commitlog_min_offset": segments[0].base_offset if segments else 0,
                "queues": [q.as_dict() for q in queues], "entries": sum(q.entries for q in queues),
                "files": sum(len(q.files) for q in queues),
                "dropped": {"repeated": settled.dropped_repeated, "below_max_physic_offset": settled.dropped_below_max,
                            "negative_queue_offset": sum(r.negative for r in counted), **_left_out(counted)},
                "gaps": settled.gaps}
    return QueuesBuilt(manifest, queues, resolved, infos, reads, writes,
                       len(reads) if splits is None else splits)


def _written_in_place(reads: list[ReadResult]) -> dict[tuple[str, int], set[int]]:
    """The queues the reads wrote consecutive runs into (:class:`InPlace`), with the splits that did."""
    out: dict[tuple[str, int], set[int]] = {}
    for r in reads:
        t = r.table()
        if not t.num_rows:
            continue
        kinds = numpy_of(t.column("kind"))
        for topic, queue in zip(np.asarray(t.column("topic").to_pylist(), object)[kinds == CONSECUTIVE].tolist(),
                                numpy_of(t.column("queue_id"))[kinds == CONSECUTIVE].tolist()):
            out.setdefault((topic, queue), set()).add(r.split)
    return out


def _remove_if_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:  # not empty (or gone): kept
        pass


def remove_queue_files(staging: str) -> None:
    """Queue files reads wrote in place, before the log is read again another way (local staging only)."""
    if not storage.is_remote(staging):
        shutil.rmtree(os.path.join(staging, CONSUMEQUEUE_DIR), ignore_errors=True)


def _left_out(reads: list[ReadResult]) -> dict[str, int]:
    """The light-queue units the reads' rules left out, by reason (nothing without light queues)."""
    out: dict[str, int] = {}
    for r in reads:
        for reason, count in (r.left_out or {}).items():
            out[reason] = out.get(reason, 0) + count
    return out


def _for_tasks(staging: str) -> str:
    """``staging`` as tasks are given it: a URI, or a local path made absolute here on the driver. A task's
    working directory is not the driver's (a local master's Python workers run in the JVM's, a cluster's
    executors in their own), so a relative path would name another directory there."""
    return storage.resolve(staging)


def _remove_pieces(staging: str) -> None:
    """The first pass's pieces, once it is reread (a URI's stay until the commit removes ``_tasks``)."""
    if storage.is_remote(staging):
        return
    root = os.path.join(staging, TASKS_DIR)
    for name in os.listdir(root) if os.path.isdir(root) else []:
        if name.startswith("q"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _sync_dirs(root: str, settled) -> None:
    """The files were synced by their writers; their directories, here, so the names are durable too."""
    if not settled.queues:
        return
    topics = set()
    for q in settled.queues:
        fsync_dir(os.path.join(root, q.topic, str(q.queue_id)))
        topics.add(q.topic)
    for t in topics:
        fsync_dir(os.path.join(root, t))
    fsync_dir(root)
