"""The one way every build writes window files: :func:`write_windows`.

In: batches of entries (:class:`EntryBatch`: each entry's window, CommitLog offset, key hash and store time,
and where its record lies when a PHYSICALOFFSET field is not its record's position), in CommitLog order
within each window, and where the files go (a directory, or a task's :class:`rocketidx.output.target.TaskFiles`).
Out: one :class:`WrittenWindow` per window: its files and what the writer counted.

Every build calls it: the in-process build of a whole log (:mod:`rocketidx.build.in_process`), each task of the
direct plan, in process and on Spark (:mod:`rocketidx.build.direct_task`), and each writer partition of the
shuffle plan (:mod:`rocketidx.spark.writer`), which feeds it the entries of its windows, window after window.

Stays true: entries reach each window's :class:`rocketidx.index.writer.WindowWriter` in the order given, so
a window's files are the broker's bytes for its entries in CommitLog order; at most ``max_open`` slot tables
are in memory, the others suspended to disk, however many windows the batches touch.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, NamedTuple

import numpy as np

from rocketidx.errors import RocketIdxError
from rocketidx.index.writer import FileInfo, WindowWriter


class EntryBatch(NamedTuple):
    """Entries in CommitLog order: their windows and the three fields an IndexFile item holds; ``positions``:
    their records' offsets where a PHYSICALOFFSET field is not the record's position (None: all are)."""

    window: np.ndarray
    phy_offset: np.ndarray
    key_hash: np.ndarray
    store_timestamp_ms: np.ndarray
    positions: np.ndarray | None = None


@dataclass(frozen=True)
class WriterSizes:
    """The sizes and window length every writer of a build shares; small and picklable."""

    hash_slot_num: int
    index_num: int
    window_ms: int
    sync: bool = True  # False: writers only start a file's writeback; the build syncs them all before its commit


@dataclass
class WrittenWindow:
    """One window as its writer left it: its files (0..k-1, each seeded from its predecessor's end), the
    entries it put, and those the broker's ``buildIndex`` rule skipped below a file's endPhyOffset."""

    window_id: int
    window_start_ms: int
    files: list[FileInfo] = field(default_factory=list)
    entries: int = 0
    skipped_below_end: int = 0
    first_skipped_at: int | None = None  # CommitLog offset of the first record whose entries were skipped


class WindowSet:
    """Routes entries to per-window writers, keeping at most ``max_open`` slot tables in memory."""

    def __init__(self, where: Callable[[], str], sizes: WriterSizes, max_open: int,
                 start: Callable[[WindowWriter], None] | None = None):
        self.where, self.sizes, self.max_open = where, sizes, max_open  # where: the directory, asked once needed
        self.start = start  # called with each new writer before its first entry (an incremental build's carry)
        self.directory: str | None = None
        self.open: OrderedDict[int, WindowWriter] = OrderedDict()

    def add(self, b: EntryBatch) -> None:
        window = b.window
        if len(window) == 0:
            return
        if window[0] == window[-1] and (window == window[0]).all():  # the common case: one window
            self._writer(int(window[0])).add(b.phy_offset, b.key_hash, b.store_timestamp_ms, b.positions)
            return
        # Group by window keeping CommitLog order inside each group.
        order = np.argsort(window, kind="stable")
        cuts = np.flatnonzero(np.diff(window[order])) + 1
        for idx in np.split(order, cuts):
            self._writer(int(window[idx[0]])).add(b.phy_offset[idx], b.key_hash[idx], b.store_timestamp_ms[idx],
                                                  None if b.positions is None else b.positions[idx])

    def _writer(self, w: int) -> WindowWriter:
        wr = self.open.get(w)
        if wr is None:
            if self.directory is None:
                self.directory = str(self.where())
            wr = WindowWriter(self.directory, w, self.sizes.window_ms, self.sizes.hash_slot_num, self.sizes.index_num,
                              self.sizes.sync)
            if self.start is not None:
                self.start(wr)
            self.open[w] = wr
        self.open.move_to_end(w)
        in_memory = [k for k, v in self.open.items() if v.current is not None]
        for k in in_memory[:-self.max_open]:
            self.open[k].suspend()
        return wr

    def close(self, below: int | None = None) -> list[WrittenWindow]:
        """Finish the windows below ``below`` (all when None), in window order."""
        done = []
        for w in sorted(k for k in self.open if below is None or k < below):
            wr = self.open.pop(w)
            files = wr.close()
            done.append(WrittenWindow(w, w * self.sizes.window_ms, files, wr.entries, wr.skipped_below_end,
                                      wr.first_skipped_at))
        return done

    def abort(self) -> None:
        for wr in self.open.values():
            wr.abort()


def write_windows(batches: Iterable[EntryBatch], dest, sizes: WriterSizes, *, max_open: int = 4,
                  ordered: bool = False, start: Callable[[WindowWriter], None] | None = None
                  ) -> Iterator[WrittenWindow]:
    """Write the windows' IndexFiles from ``batches``; yields each window once its files are closed.

    ``dest``: a directory, or an object with ``local`` (the directory to write in) and ``publish(names)``
    (make closed files visible where they belong: :class:`rocketidx.output.target.TaskFiles` uploads them to
    a URI). ``ordered``: the batches come window after window (the shuffle plan's sorted partitions), so a
    window is finished, published and yielded as soon as a later one starts, and its files never wait for
    the end. On any error the open files are closed unfinished and the error raised: the caller discards
    the directory. ``start``: called with each window's writer before its first entry (an incremental build
    continues a window's earlier files: :meth:`rocketidx.index.writer.WindowWriter.continue_after`).
    """
    local = isinstance(dest, (str, os.PathLike))
    writers = WindowSet((lambda: dest) if local else (lambda: dest.local), sizes, max_open, start)
    publish = None if local else dest.publish
    latest = None  # ordered: the highest window seen
    try:
        for b in batches:
            if ordered and len(b.window):
                first = int(b.window.min())
                if latest is not None and first < latest:
                    raise RocketIdxError(f"window {first} arrived out of order, after window {latest}; the "
                                         "entries must come window after window")
                latest = int(b.window.max())
                yield from _finished(writers.close(below=first), publish)
            writers.add(b)
        yield from _finished(writers.close(), publish)
    except BaseException:
        writers.abort()
        raise


def _finished(windows: list[WrittenWindow], publish) -> Iterator[WrittenWindow]:
    for w in windows:
        if publish is not None:
            publish([f.name for f in w.files])
        yield w
