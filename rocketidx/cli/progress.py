"""One updating progress line on stderr for a long command, on a terminal only.

In: what is being done (a label) and, as it goes, how far it got: bytes of the CommitLog read
(:meth:`ProgressLine.reader`, the in-process build's ``progress`` hook) or Spark's task counts
(:func:`spark_progress`, polling ``statusTracker()`` from a thread). Out: one line on stderr, rewritten
in place with ``\\r``, e.g. ``build: 1.2 GiB of 8.5 GiB read (14%), 310 MB/s``.

Stays true: nothing is written unless the line is enabled (commands turn it off for ``--json``) and
stderr is a terminal, so a pipe, a log file or a test's capture never sees it; nothing appears during
the first ``delay`` seconds, so short work prints nothing; the line is redrawn at most every ``interval``
seconds and erased when the work ends, however it ends, so what follows starts on a clean line.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TextIO

from rocketidx.ops.progress import Progress
from rocketidx.units import human_bytes

ERASE = "\r\x1b[K"  # back to column 0, clear to the end of the line
DELAY = 1.0  # seconds of work before the line first appears: a short command prints none


class ProgressLine:
    """The line itself: :meth:`show` a text (rate-limited), :meth:`close` to erase it."""

    def __init__(self, label: str, *, enabled: bool = True, stream: TextIO | None = None, delay: float | None = None,
                 interval: float = 0.25, clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.interval, self.clock = label, interval, clock
        self.delay = DELAY if delay is None else delay
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and _is_terminal(self.stream)
        self.start = clock()
        self.last = float("-inf")
        self.drawn = False
        self.lock = threading.Lock()

    def show(self, text: str) -> None:
        """Draw ``label: text`` unless it is too early, too soon after the last draw, or disabled."""
        with self.lock:  # the Spark poller draws from its thread; never after close()
            now = self.clock()
            if not self.enabled or now - self.start < self.delay or now - self.last < self.interval:
                return
            self.last = now
            self._write(f"{ERASE}{self.label}: {text}")
            self.drawn = True

    def bytes_done(self, done: int, total: int) -> None:
        """``done`` of ``total`` bytes, with the share and the rate since the start."""
        elapsed = self.clock() - self.start
        share = f" ({done / total:.0%})" if total else ""
        rate = f", {done / elapsed / 1e6:.0f} MB/s" if elapsed > 0 else ""
        self.show(f"{human_bytes(done)} of {human_bytes(total)} read{share}{rate}")

    def reader(self, total: int) -> Callable:
        """The ``progress`` hook of :func:`rocketidx.build.in_process.build_index`: it is called with the
        CommitLogReader after every batch."""
        return lambda reader: self.bytes_done(reader.bytes_read + reader.in_segment, total)

    def close(self) -> None:
        """Erase the line if it was drawn."""
        with self.lock:
            if self.drawn:
                self._write(ERASE)
                self.drawn = False
            self.enabled = False

    def _write(self, s: str) -> None:
        try:
            self.stream.write(s)
            self.stream.flush()
        except (OSError, ValueError):  # stderr gone: progress is never worth failing for
            self.enabled = False

    def __enter__(self) -> "ProgressLine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def spark_tasks(tracker) -> tuple[int, int, int] | None:
    """(done, running, total) tasks of the stages Spark runs now, from a ``StatusTracker``; None when no
    stage runs (between jobs)."""
    done = running = total = 0
    for sid in tracker.getActiveStageIds():
        info = tracker.getStageInfo(sid)
        if info is not None:
            done += info.numCompletedTasks
            running += info.numActiveTasks
            total += info.numTasks
    return (done, running, total) if total else None


@contextmanager
def spark_progress(spark, label: str, *, enabled: bool = True, stream: TextIO | None = None,
                   poll: float = 0.5, delay: float | None = None) -> Iterator[ProgressLine]:
    """While the body runs, a thread polls the session's status tracker and shows the running stages'
    tasks (``build on Spark: 12 of 25 tasks done, 2 running, 14s``); Spark's own console progress bar
    is off in sessions rocketidx starts (rocketidx.spark.session)."""
    line = ProgressLine(label, enabled=enabled, stream=stream, delay=delay, interval=poll / 2)
    if not line.enabled:
        yield line
        return
    stop = threading.Event()

    def run() -> None:
        tracker = spark.sparkContext.statusTracker()
        while not stop.wait(poll):
            try:
                tasks = spark_tasks(tracker)
            except Exception:  # the session stopping under us: the line simply ends
                return
            if tasks:
                done, running, total = tasks
                line.show(f"{done} of {total} tasks done, {running} running, {line.clock() - line.start:.0f}s")

    poller = threading.Thread(target=run, name="rocketidx-progress", daemon=True)
    poller.start()
    try:
        yield line
    finally:
        stop.set()
        poller.join(timeout=2 * poll)
        line.close()


class CommandProgress(Progress):
    """A command's progress (:class:`rocketidx.ops.progress.Progress`): bytes read in process, tasks on
    Spark (``<label> on Spark``), on one line on a terminal; nothing when not ``enabled`` (``--json``); the
    engine chosen, on stdout, with ``say_engine``."""

    def __init__(self, label: str, *, enabled: bool = True, say_engine: bool = False) -> None:
        self.label, self.enabled, self.say_engine = label, enabled, say_engine

    def engine(self, engine) -> None:
        """``engine: NAME (REASON)`` on stdout before the work, with ``say_engine`` (verify's first line)."""
        if self.say_engine:
            print(f"engine: {engine.name} ({engine.reason})")

    @contextmanager
    def reading(self, total_bytes: int) -> Iterator[Callable]:
        with ProgressLine(self.label, enabled=self.enabled) as line:
            yield line.reader(total_bytes)

    def on_spark(self, spark):
        return spark_progress(spark, f"{self.label} on Spark", enabled=self.enabled)
