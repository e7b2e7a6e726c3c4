"""The in-process engine on every core: the tasks Spark runs, run on a pool of worker processes here.

In: the direct plan's tasks (:mod:`rocketidx.build.direct_task`), or the ConsumeQueue build's read and write
tasks (:mod:`rocketidx.build.queues`), and a number of workers. Out: the same results, in task order, that
:func:`rocketidx.build.direct_task.local_job`, :func:`rocketidx.build.queues.local_reads` and
:func:`rocketidx.build.queues.local_writes` give running them one after another.

Why processes: the compiled kernel and numpy release the GIL for parts of a task only, and the index writer's
placement is Python; a task is a few hundred MB of the log, so a process per core costs little beside it.
Workers are forked, so they start without importing anything and see this process's settings (the release's
index rules among them). Memory per worker is what a Spark task holds: a task's windows' slot tables and one
batch. A failure or an interrupt in any task terminates the pool: a worker must not go on writing into a
staged version its driver is discarding.
"""
from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass
from typing import Callable

from rocketidx.build.direct_task import WriterParams, local_job, run_task, task_dir_name
from rocketidx.build.plan import DirectTask
from rocketidx.build.queues import FilePlan, ReadParams, local_reads, local_writes, read_task, write_task
from rocketidx.build.results import TaskResult
from rocketidx.commitlog.segments import SegmentRange
from rocketidx.commitlog.splits import SplitSpec
from rocketidx.process_cost import keep_freed_memory


def available_cores() -> int:
    """The cores this process may run on (its affinity, which a container's CPU set narrows)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# From this many bytes to read, an in-process build takes a worker per core by default: below it the one pass is
# about as fast and the pool's start (forks, the plan's bisection) is not worth it (docs/benchmarks.md).
WORKERS_FROM_BYTES = 256 << 20


def default_workers(work_bytes: int) -> int:
    """``--workers`` when not given: one per core for a read of at least :data:`WORKERS_FROM_BYTES`, else 1."""
    return available_cores() if work_bytes >= WORKERS_FROM_BYTES else 1


def _run(workers: int, fn, calls: list[tuple], done: Callable[[int], None] | None = None,
         sizes: list[int] | None = None) -> list:
    """``fn(*args)`` for each of ``calls`` on up to ``workers`` forked processes, results in order; ``done(i)``
    as each call ``i`` finishes (from the pool's result thread). ``sizes``: each call's cost; the largest start
    first, so the small ones fill in at the end instead of a large one running alone (store-6m's 23 full
    windows and its two partial ones end within a tenth of a second of each other on two workers)."""
    if workers <= 1 or len(calls) <= 1:
        out = []
        for i, args in enumerate(calls):
            out.append(fn(*args))
            if done:
                done(i)
        return out
    pool = multiprocessing.get_context("fork").Pool(min(workers, len(calls)), initializer=keep_freed_memory)
    try:
        order = sorted(range(len(calls)), key=lambda i: -sizes[i]) if sizes else range(len(calls))
        pending = {i: pool.apply_async(fn, calls[i], callback=(lambda _, i=i: done(i)) if done else None)
                   for i in order}
        out = [pending[i].get() for i in range(len(calls))]
    except BaseException:
        pool.terminate()
        pool.join()
        raise
    pool.close()
    pool.join()
    return out


@dataclass
class _Read:
    """What a progress hook reads off a reader (:meth:`rocketidx.cli.progress.ProgressLine.reader`)."""

    bytes_read: int = 0
    in_segment: int = 0


def pool_job(spec: SplitSpec, params: WriterParams, workers: int,
             progress: Callable | None = None) -> Callable[..., list[TaskResult]]:
    """A ``run_job`` for :func:`rocketidx.build.direct_task.run_direct` on ``workers`` processes; ``progress``: a
    build's progress hook, called with the bytes of the tasks finished so far as each one finishes."""
    if workers <= 1 and progress is None:
        return local_job(spec, params)

    def run(tasks: list[DirectTask], what: str, report_ranges: bool = True) -> list[TaskResult]:
        read = _Read()

        def done(i: int) -> None:
            read.bytes_read += tasks[i].bytes
            if progress and report_ranges:
                progress(read)
        return _run(workers, _direct, [(t, spec, params, report_ranges) for t in tasks], done,
                    [t.bytes + sum(p.end - p.start for p in t.extra) for t in tasks])
    return run


def _direct(task: DirectTask, spec: SplitSpec, params: WriterParams, report_ranges: bool) -> TaskResult:
    return run_task(task, spec, params, task_dir_name(task, "local"), 0, report_ranges=report_ranges)


def pool_reads(workers: int) -> Callable:
    """A ``run_reads`` for :func:`rocketidx.build.queues.build_queues` on ``workers`` processes."""
    if workers <= 1:
        return local_reads

    def run(splits: list[SegmentRange], params: ReadParams):
        return _run(workers, read_task, [(s, params) for s in splits], sizes=[s.end - s.start for s in splits])
    return run


def pool_writes(workers: int) -> Callable:
    """A ``run_writes`` for :func:`rocketidx.build.queues.place_queues` on ``workers`` processes."""
    if workers <= 1:
        return local_writes

    def run(groups: list[list[FilePlan]], staging: str, file_size: int, sync: bool = True) -> list[dict]:
        return _run(workers, write_task, [(g, staging, file_size, sync) for g in groups])
    return run
