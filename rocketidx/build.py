"""The in-process build: CommitLog directory -> committed index output, in one Python process.

In: a CommitLog (or store) directory and a :class:`BuildConfig`. Out: ``OUT/index/<files>``,
``OUT/_manifest.json`` and a :class:`BuildSummary`.
Stays true: the files equal what RocketMQ's ``IndexFile`` writes for each window's entries in CommitLog
order; batches stream through, so memory is a few windows' slot tables plus one batch, however large a
window is (windows beyond ``max_open_windows`` are suspended to disk and resumed when needed).
The Spark pipeline (``rocketidx.spark``) produces the same output from the same core functions.
"""
from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa

from rocketidx import layout as L
from rocketidx.config import BuildConfig
from rocketidx.errors import CorruptRecordError
from rocketidx.entries import entry_positions, first_entries_mask, rollback_count
from rocketidx.indexfile import FileInfo, WindowWriter
from rocketidx.manifest import INDEX_DIR, MANIFEST_VERSION
from rocketidx import storage
from rocketidx.output import LocalOutput, built_here
from rocketidx.segments import Segment, list_segments
from rocketidx.splits import CommitLogReader, first_misplaced
from rocketidx.timeindex import AUTO, DEFAULT_BLOCK_BYTES, BlockCollector, default_dir
from rocketidx.timeindex import keep as keep_time_index
from rocketidx.windows import assign_windows

log = logging.getLogger(__name__)


@dataclass
class BuildSummary:
    segments: int = 0
    bytes_read: int = 0
    messages: int = 0
    messages_indexed: int = 0
    rollback_skipped: int = 0
    below_end_phy_offset_skipped: int = 0
    below_end_first_offset: int | None = None  # CommitLog offset of the first record whose entries were skipped
    entries: int = 0
    windows: int = 0
    files: int = 0
    stop: dict | None = None
    stops: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    bytes_scanned: int = 0  # bytes the reader went through (less than bytes_read when a time index skipped some)
    time_index: str | None = None  # how a time slice used the time index, when it was asked to
    phy_mismatch: dict | None = None  # first record whose PHYSICALOFFSET is not its position: segment, offset

    def as_dict(self) -> dict:
        return asdict(self)


class WindowSet:
    """Routes entries to per-window writers, keeping at most ``max_open`` slot tables in memory."""

    def __init__(self, directory: str, config: BuildConfig, max_open: int = 4):
        self.directory, self.config, self.max_open = directory, config, max_open
        self.writers: OrderedDict[int, WindowWriter] = OrderedDict()

    def add(self, window: np.ndarray, phy: np.ndarray, key_hash: np.ndarray, ts: np.ndarray,
            positions: np.ndarray | None = None) -> None:
        """Entries in CommitLog order; ``positions``: their records' offsets where a PHYSICALOFFSET lies."""
        if len(window) == 0:
            return
        if window[0] == window[-1] and (window == window[0]).all():  # the common case: one window
            self._writer(int(window[0])).add(phy, key_hash, ts, positions)
            return
        # Group by window keeping CommitLog order inside each group.
        order = np.argsort(window, kind="stable")
        w_sorted = window[order]
        cuts = np.flatnonzero(np.diff(w_sorted)) + 1
        for idx in np.split(order, cuts):
            self._writer(int(window[idx[0]])).add(phy[idx], key_hash[idx], ts[idx],
                                                  None if positions is None else positions[idx])

    def _writer(self, w: int) -> WindowWriter:
        wr = self.writers.get(w)
        if wr is None:
            wr = WindowWriter(self.directory, w, self.config.window_ms, self.config.hash_slot_num,
                              self.config.index_num)
            self.writers[w] = wr
        self.writers.move_to_end(w)
        open_ones = [k for k, v in self.writers.items() if v.current is not None]
        for k in open_ones[:-self.max_open]:
            self.writers[k].suspend()
        return wr

    def close(self) -> list[FileInfo]:
        files: list[FileInfo] = []
        for wr in self.writers.values():
            files.extend(wr.close())
        return files

    def abort(self) -> None:
        for wr in self.writers.values():
            wr.abort()

    @property
    def skipped_below_end(self) -> int:
        return sum(w.skipped_below_end for w in self.writers.values())

    @property
    def first_skipped_at(self) -> int | None:
        return min((w.first_skipped_at for w in self.writers.values() if w.first_skipped_at is not None),
                   default=None)


def build_index(commitlog: str | os.PathLike, out: str | os.PathLike, config: BuildConfig = BuildConfig(),
                *, segments: list[Segment] | None = None, progress=None, native: bool | None = None,
                start_offset: int | None = None, skip_entries: int = 0, name_after: str | None = None,
                time_index: str | None = "auto") -> tuple[dict, BuildSummary]:
    """Build and commit the index of a CommitLog. Returns (manifest, summary).

    ``commitlog`` and ``out``: local paths or URIs (a URI output is built in local scratch space and
    published there: :func:`rocketidx.output.built_here`). ``start_offset``: read from the first record
    at or after this absolute offset (a backfill's range); ``skip_entries``: drop the first entries of the
    message at ``start_offset`` (already indexed in the file the range continues); ``name_after``: every
    file name must sort after this one.
    """
    remote = storage.is_remote(out)
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
    tdir = default_dir(out) if time_index == AUTO else time_index
    with output.lock():
        staging = output.new_staging()
        windows = WindowSet(os.path.join(staging.path, INDEX_DIR), config)
        try:
            blocks = BlockCollector(DEFAULT_BLOCK_BYTES) if tdir and start_offset is None and not skip_entries \
                else None
            reader = CommitLogReader(segments, check_crc=config.check_crc, batch_records=config.batch_records,
                                     native=native, start_offset=start_offset,
                                     on_records=blocks.add if blocks else None)
            for seg, buf, recs, entries in reader.entry_chunks():
                summary.messages += len(recs)
                if summary.phy_mismatch is None:
                    summary.phy_mismatch = first_misplaced(seg, recs)
                summary.rollback_skipped += rollback_count(recs)
                positions = entry_positions(buf, seg, recs, entries)
                drop = first_entries_mask(entries, start_offset, skip_entries, positions)
                if drop is not None:
                    entries = entries.filter(pa.array(~drop))
                    positions = None if positions is None else positions[~drop]
                phy = entries.column("phy_offset").to_numpy()
                summary.messages_indexed += int(np.count_nonzero(entries.column("entry_seq").to_numpy() == 0))
                ts = entries.column("store_timestamp_ms").to_numpy()
                windows.add(assign_windows(ts, config.window_ms), phy,
                            entries.column("key_hash").to_numpy(), ts, positions)
                summary.entries += entries.num_rows
                if progress:
                    progress(reader)
            files = windows.close()
        except BaseException:
            windows.abort()
            output.discard(staging)
            raise
        summary.bytes_read = summary.bytes_scanned = reader.bytes_read
        try:
            refuse_invalid_log(segments, reader.stop.as_dict() if reader.stop else None,
                               start_offset)
        except BaseException:
            output.discard(staging)
            raise
        summary.stop = reader.stop.as_dict() if reader.stop else None
        summary.stops = [s.as_dict() for s in reader.stops]
        summary.below_end_phy_offset_skipped = windows.skipped_below_end
        summary.below_end_first_offset = windows.first_skipped_at
        summary.entries -= summary.below_end_phy_offset_skipped
        summary.windows = len({f.window_id for f in files})
        summary.files = len(files)
        summary.wall_s = round(time.monotonic() - t0, 3)
        manifest = manifest_header(config, segments, summary)
        try:
            manifest = output.commit(staging, files, manifest, config.tzinfo, name_after=name_after)
        except BaseException:
            output.discard(staging)
            raise
        keep_time_index(tdir, segments, blocks, summary.stops, config.check_crc)
    return manifest, summary


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


def unread(segments: list[Segment], stop: dict | None) -> tuple[int, int]:
    """(bytes, segments) of the log after a stop that ends reading early (an invalid record, or a zero
    tail before the last segment), as the broker's recovery would drop them too; (0, 0) otherwise."""
    if not stop or stop["kind"] not in ("corrupt", "end_of_data"):
        return 0, 0
    after = [s for s in segments if s.base_offset > stop["phy_offset"] - stop["segment_offset"]]
    if stop["kind"] == "end_of_data" and not after:
        return 0, 0  # the newest segment's zero tail: the normal end of a log
    here = next((s for s in segments if s.name == stop["segment"]), None)
    left = (here.size - stop["segment_offset"]) if here is not None and stop["kind"] == "corrupt" else 0
    return left + sum(s.size for s in after), len(after)


def manifest_header(config: BuildConfig, segments: list[Segment], summary: BuildSummary) -> dict:
    return {
        "version": MANIFEST_VERSION,
        "hash_slot_num": config.hash_slot_num,
        "index_num": config.index_num,
        "index_file_size": L.index_file_size(config.hash_slot_num, config.index_num),
        "window_ms": config.window_ms,
        "timezone": config.timezone,
        "check_crc": config.check_crc,
        "commitlog": storage.redact(segments[0].path).rsplit("/", 1)[0] if segments else None,
        "segments": [{"name": s.name, "base_offset": s.base_offset, "size": s.size} for s in segments],
        "messages": summary.messages,
        "messages_indexed": summary.messages_indexed,
        "rollback_skipped": summary.rollback_skipped,
        "below_end_phy_offset_skipped": summary.below_end_phy_offset_skipped,
        "entries": summary.entries,
        "windows": summary.windows,
        "bytes_read": summary.bytes_read,
        "stop": summary.stop,
    } | ({"phy_mismatch": summary.phy_mismatch} if summary.phy_mismatch else {}) | (
        {"below_end_first_offset": summary.below_end_first_offset}
        if summary.below_end_first_offset is not None else {})

