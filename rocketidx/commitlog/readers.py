"""Reading a CommitLog: one range of a segment, one split from its file, or segments in order.

In: :class:`rocketidx.commitlog.segments.Segment` refs (local or URI), byte ranges and a
:class:`rocketidx.commitlog.splits.SplitSpec`. Out:

* :class:`RangeReader` (one range of a segment's bytes) and :class:`CommitLogReader` (segments in order,
  as the broker's recovery reads them), yielding records arrays, entries, or message batches;
* :func:`read_split`: one split read from its file (local, or fetched from a URI), filtered by the spec,
  ending with a :class:`rocketidx.commitlog.splits.RangeInfo` that says what it saw;
* :func:`read_range` / :func:`read_ahead`: one range of a segment read as a :class:`RangeReader` reads it, on
  several threads in pieces where it is long (``CommitLogReader(threads=N)``).

Stays true:
* a split reads only the records that START in its range, resynchronising on PHYSICALOFFSET where the
  range does not start at a record, so no segment is ever one task's memory;
* a split cannot know that an earlier split stopped for good, so what it reads is what it saw: its own
  stop ends it. A split whose chain runs into the next split's bytes peeks at that record, so an invalid
  record or a zero tail that starts exactly there is reported by the split that leads to it.
"""
from __future__ import annotations

import logging
from typing import Generator, Iterator, NamedTuple

import numpy as np
import pyarrow as pa

from rocketidx.arrays import arrow, numpy_of
from rocketidx.commitlog.columns import MESSAGE_SCHEMA, records_to_batch
from rocketidx.commitlog.entries import entry_positions, first_entries_mask, rollback_count, scan_entry_chunks
import rocketidx.layout as L
from rocketidx.process_cost import Usage
from rocketidx.commitlog.records import (STOP_CORRUPT, STOP_RANGE_END, STOP_SEGMENT_END, ReadStop, find_first_record, release_pages, scan_records)
from rocketidx.commitlog.native import reader_name
from rocketidx.commitlog.segments import Segment, SegmentRange, open_segment
from rocketidx.commitlog.splits import DEFAULT_BATCH_RECORDS, FINAL_STOPS, RangeInfo, SplitSpec, skip_mask
import rocketidx.storage as storage


log = logging.getLogger(__name__)
# A remote split fetches this much past its end: a record that starts in the split ends within it,
# since the broker caps a message at maxMessageSize = 4 MiB (a longer one triggers a full refetch).
REMOTE_MARGIN_BYTES = 8 * 1024**2


class RangeReader:
    """Reads the records that start in one :class:`SegmentRange`, in batches.

    Iterate it for message RecordBatches, or call :meth:`record_chunks` for the records arrays (what
    :func:`rocketidx.commitlog.entries.entries_from_records` takes) or :meth:`entry_chunks` for records and their
    entries. Afterwards ``stop`` says where reading ended. ``buf`` holds the whole segment (``bytes`` or
    ``mmap``); a record that starts in the range may end past it. ``native=None`` uses the compiled kernel
    when it is built.
    """

    def __init__(self, buf, rng: SegmentRange, *, check_crc: bool = True,
                 batch_records: int = DEFAULT_BATCH_RECORDS, native: bool | None = None, on_records=None,
                 at_record: bool = False):
        self.buf, self.range, self.check_crc, self.batch_records = buf, rng, check_crc, batch_records
        # at_record: the range starts where a record does (or where the log's data ends), as an earlier read of
        # the same log found it; the read judges the bytes there as a record, with no search for one
        self.at_record = at_record
        self.native = native
        self.on_records = on_records  # called with (segment, records array) for every batch scanned
        self.stop: ReadStop | None = None
        self.first: int | None = None  # where the first record read starts (None: none starts in the range)
        self.records = 0

    def _chunks(self, scan):
        seg, start, end = self.range.segment, self.range.start, self.range.end
        first = self.first = start if self.at_record else find_first_record(self.buf, seg, start, end, self.native)
        if first is None:
            self.stop = ReadStop(seg.path, seg.base_offset, end if end < seg.size else seg.size,
                                 STOP_RANGE_END if end < seg.size else STOP_SEGMENT_END,
                                 "no record starts in this range")
            return
        gen = scan(self.buf, seg, first, end, check_crc=self.check_crc, batch_records=self.batch_records,
                   native=self.native)
        released = first
        while True:
            try:
                item = next(gen)
            except StopIteration as done:
                self.stop = done.value
                return
            recs = item[0] if isinstance(item, tuple) else item
            self.records += len(recs)
            if self.on_records is not None:
                self.on_records(seg, recs)
            yield item
            last_end = int(recs[-1, L.REC_POS] + recs[-1, L.REC_TOTAL])
            release_pages(self.buf, released, last_end)
            released = last_end

    def record_chunks(self) -> Iterator[np.ndarray]:
        """Records arrays, ``batch_records`` rows at most each."""
        return self._chunks(scan_records)

    def entry_chunks(self) -> Iterator[tuple[np.ndarray, pa.RecordBatch]]:
        """(records array, entries batch) pairs: what the build needs, in one pass with the kernel."""
        return self._chunks(scan_entry_chunks)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for recs in self.record_chunks():
            yield records_to_batch(self.buf, self.range.segment, recs)


def read_segment(seg: Segment, *, check_crc: bool = True, start: int = 0, end: int | None = None,
                 batch_records: int = DEFAULT_BATCH_RECORDS, native: bool | None = None
                 ) -> tuple[pa.Table, ReadStop]:
    """Convenience: the records of a segment (or a range of it) as one table, and the stop."""
    buf = open_segment(seg)
    reader = RangeReader(buf, SegmentRange(seg, start, seg.size if end is None else end),
                         check_crc=check_crc, batch_records=batch_records, native=native)
    batches = list(reader)
    return pa.Table.from_batches(batches, MESSAGE_SCHEMA), reader.stop


def first_misplaced(seg: Segment, recs: np.ndarray) -> dict | None:
    """The first record of ``recs`` whose PHYSICALOFFSET field is not its position, as the manifest
    names it (the broker's recovery reads such a record; ``verify`` must then judge the log whole)."""
    bad = recs[:, L.REC_PHY] != recs[:, L.REC_POS] + seg.base_offset
    if not bad.any():
        return None
    return {"segment": seg.name, "segment_offset": int(recs[int(np.argmax(bad)), L.REC_POS])}


class CommitLogReader:
    """Reads segments in order as the broker's recovery does; ``stop`` is where reading ended for good.

    Iterate it for message batches, or use :meth:`record_chunks` for (segment, buffer, records array).
    ``stops`` lists every segment's stop (blank records included), for the summary.
    """

    def __init__(self, segments: list[Segment], *, check_crc: bool = True,
                 batch_records: int = DEFAULT_BATCH_RECORDS, native: bool | None = None,
                 start_offset: int | None = None, end_offset: int | None = None, on_records=None,
                 start_at_record: bool = False, threads: int = 1):
        self.segments, self.check_crc, self.batch_records = segments, check_crc, batch_records
        self.threads = threads  # >1: each segment's bytes are scanned in pieces on this many threads (read_ahead)
        self.start_at_record = start_at_record  # start_offset is where a record starts (RangeReader's at_record)
        self.on_records = on_records  # see RangeReader
        self.start_offset = start_offset  # absolute; reading starts at the first record at or after it
        self.end_offset = end_offset  # absolute; only records starting before it are read
        self.native = native
        self.stop: ReadStop | None = None
        self.stops: list[ReadStop] = []
        self.records = 0
        self.bytes_read = 0
        self.segments_read = 0
        self.in_segment = 0  # where the last batch ended in the segment being read, as bytes_read counts (progress)

    def _chunks(self, entries: bool):
        for seg in self.segments:
            if self.end_offset is not None and seg.base_offset >= self.end_offset:
                return
            buf = open_segment(seg)
            start = 0
            if self.start_offset is not None and seg.base_offset < self.start_offset < seg.end_offset:
                start = self.start_offset - seg.base_offset
            end = seg.size if self.end_offset is None else min(seg.size, self.end_offset - seg.base_offset)
            items = read_range(buf, SegmentRange(seg, start, end), entries=entries, threads=self.threads,
                               at_record=self.start_at_record and start > 0, check_crc=self.check_crc,
                               batch_records=self.batch_records, native=self.native)
            for item in items:
                recs = item[0] if entries else item
                if self.on_records is not None:
                    self.on_records(seg, recs)
                self.records += len(recs)
                self.in_segment = int(recs[-1, L.REC_POS] + recs[-1, L.REC_TOTAL])
                yield (seg, buf) + (item if entries else (item,))
            stop = items.stop
            self.in_segment = 0
            self.segments_read += 1
            self.stops.append(stop)
            self.bytes_read += stop.segment_offset
            self.stop = stop
            if stop.final:
                return

    def record_chunks(self) -> Iterator[tuple[Segment, object, np.ndarray]]:
        """(segment, buffer, records array) in CommitLog order."""
        return self._chunks(False)

    def entry_chunks(self) -> Iterator[tuple[Segment, object, np.ndarray, pa.RecordBatch]]:
        """(segment, buffer, records array, entries batch) in CommitLog order."""
        return self._chunks(True)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for seg, buf, recs in self.record_chunks():
            yield records_to_batch(buf, seg, recs)


class Chunks:
    """Iterate it for a read's chunks; afterwards ``stop`` is the stop its generator returned."""

    def __init__(self, gen):
        self.gen = gen
        self.stop: ReadStop | None = None

    def __iter__(self):
        self.stop = yield from self.gen


def read_range(buf, rng: SegmentRange, *, entries: bool, threads: int = 1, at_record: bool = False,
               check_crc: bool = True, batch_records: int = DEFAULT_BATCH_RECORDS, native: bool | None = None
               ) -> Chunks:
    """A :class:`RangeReader`'s chunks of ``rng`` (records arrays, or (records, entries) pairs with ``entries``),
    scanned on ``threads`` threads where the range holds two pieces or more (:func:`read_ahead`), and its stop."""
    if threads > 1 and rng.end - rng.start >= 2 * PIECE_BYTES:
        return Chunks(read_ahead(buf, rng.segment, rng.start, rng.end, at_record, entries, threads,
                                 check_crc=check_crc, batch_records=batch_records, native=native))
    reader = RangeReader(buf, rng, check_crc=check_crc, batch_records=batch_records, native=native,
                         at_record=at_record)
    return Chunks(_stopped(reader, reader.entry_chunks() if entries else reader.record_chunks()))


def _stopped(reader: RangeReader, chunks):
    yield from chunks
    return reader.stop


# read_ahead's pieces: a few per core in a 256 MiB segment, so a thread's output waiting to be consumed stays small
# (a piece's records arrays and entries take about half its bytes for messages of 700 bytes, more for smaller ones).
PIECE_BYTES = 32 << 20


def read_ahead(buf, seg: Segment, start: int, end: int, at_record: bool, entries: bool, threads: int, *,
               check_crc: bool, batch_records: int, native: bool | None):
    """The chunks of a sequential read of ``[start, end)`` of one segment, in order, scanned in pieces of
    :data:`PIECE_BYTES` on ``threads`` threads (the compiled kernel releases the GIL while it scans); returns the
    stop a sequential read makes.

    A piece after the first finds its first record by resynchronising (RangeReader); it is used only when that
    is exactly where the record chain of the pieces before it leads, else that piece is read again from there,
    so the records, the entries and the stop are a sequential read's whatever the bytes. At most ``threads + 1``
    pieces are in flight, which bounds the memory whatever the segment's size."""
    from concurrent.futures import ThreadPoolExecutor

    cuts = list(range(start, end, PIECE_BYTES)) + [end]
    ranges = list(zip(cuts, cuts[1:]))

    def piece(a: int, b: int, at: bool) -> tuple[RangeReader, list]:
        reader = RangeReader(buf, SegmentRange(seg, a, b), check_crc=check_crc, batch_records=batch_records,
                             native=native, at_record=at)
        return reader, list(reader.entry_chunks() if entries else reader.record_chunks())

    pool = ThreadPoolExecutor(threads, thread_name_prefix="read-ahead")
    try:
        pending = {}
        expected = None  # where the chain of records read so far leads (None: no record found yet, still searching)
        for k, (a, b) in enumerate(ranges):
            for j in range(k, min(k + threads + 1, len(ranges))):
                if j not in pending:
                    pending[j] = pool.submit(piece, *ranges[j], at_record if j == 0 else False)
            future = pending.pop(k)
            if expected is not None and expected >= b:
                future.cancel()  # a record of the piece before runs past this whole piece: none of the chain starts here
                continue
            reader, items = future.result()
            if expected is not None and reader.first != expected:
                reader, items = piece(expected, b, True)
            yield from items
            stop = reader.stop
            if k == len(ranges) - 1 or stop.kind != STOP_RANGE_END:
                return stop
            if reader.first is not None:
                expected = stop.segment_offset
        return stop
    finally:
        # No thread may still scan the segment's mapping once the caller goes on (and may close it).
        pool.shutdown(wait=True, cancel_futures=True)


class SegmentView:
    """A split's view of its segment: a read-only mapping of the local file, or of a local sparse copy
    of the bytes a remote split needs (``hi`` bounds what was fetched)."""

    def __init__(self, rng: SegmentRange, fetch_to: int | None = None):
        seg = self.seg = rng.segment
        remote = storage.is_remote(seg.path)
        self.hi = seg.size if fetch_to is None or not remote else min(seg.size, fetch_to)
        self.buf = storage.map_range(seg.path, seg.size, rng.start, self.hi)

    @property
    def partial(self) -> bool:
        return self.hi < self.seg.size

    def covers(self, info: RangeInfo) -> bool:
        """Whether a read touched only fetched bytes (holes read as zeros, which could pass for a zero
        tail or fail a CRC). A final stop is always rechecked against the whole segment."""
        if not self.partial:
            return True
        if info.stop_kind in FINAL_STOPS:
            return False
        at = info.stop_offset
        if info.stop_kind != STOP_RANGE_END or info.first is None:
            return at + 8 <= self.hi
        if at + 4 > self.hi:
            return False
        total = int.from_bytes(self.buf[at:at + 4], "big", signed=True)
        return at + max(total, 8) <= self.hi

    def close(self) -> None:
        # Arrow batches and numpy views may still point into the mapping: let them release it.
        self.buf = None


class SplitChunk(NamedTuple):
    """One batch of a split's records that the spec keeps, with their entries when they were asked for."""

    segment: Segment
    buf: object  # the segment's bytes (positions in ``recs`` point into them)
    recs: np.ndarray  # records array (layout.REC_*)
    entries: pa.RecordBatch | None  # rocketidx.commitlog.entries.ENTRY_SCHEMA
    # Each entry's record offset, where some record's PHYSICALOFFSET is not its position (None: the
    # entries' phy_offset is it): what orders and cuts entries (rocketidx.commitlog.entries.entry_positions).
    positions: np.ndarray | None = None


def read_split(rng: SegmentRange, spec: SplitSpec, *, entries: bool = False, chunks: bool = True,
               on_records=None) -> Generator[SplitChunk, None, RangeInfo]:
    """Read one split: yield the :class:`SplitChunk` batches ``spec`` keeps; return its :class:`RangeInfo`.

    ``entries``: read the entries too (and count them); ``chunks=False`` yields nothing (only the info
    is wanted). A remote split fetches its range plus :data:`REMOTE_MARGIN_BYTES`; when its read saw past
    that, it is read again with the rest of the segment, and nothing is yielded before a read that
    proved sufficient. ``on_records(segment, records)`` sees every record scanned, before any filter
    (a :class:`rocketidx.commitlog.timeindex.BlockCollector` keeps the time map this way).
    """
    fetch_to = rng.end + REMOTE_MARGIN_BYTES if storage.is_remote(rng.segment.path) else None
    while True:
        view = SegmentView(rng, fetch_to)
        try:
            held: list[SplitChunk] = []
            gen = _read_view(view, rng, spec, entries, on_records)
            while True:
                try:
                    chunk = next(gen)
                except StopIteration as done:
                    info = done.value
                    break
                if not chunks:
                    continue
                if view.partial:
                    held.append(chunk)
                else:
                    yield chunk
            if view.covers(info):
                yield from held
                if info.stop_kind == STOP_CORRUPT:
                    log.info("reading %s stopped at byte %d: %s", info.path, info.stop_offset, info.stop_reason)
                return info
        finally:
            view.close()
        fetch_to = rng.segment.size


def _read_view(view: SegmentView, rng: SegmentRange, spec: SplitSpec, with_entries: bool, on_records=None):
    usage = Usage()
    seg, buf = view.seg, view.buf
    reader = RangeReader(buf, rng, check_crc=spec.check_crc, batch_records=spec.batch_records,
                         on_records=on_records)
    first = None
    records = rollback = indexed = n_entries = 0
    mismatch = None
    for item in (reader.entry_chunks() if with_entries else reader.record_chunks()):
        recs, entries = item if with_entries else (item, None)
        if first is None:
            first = int(recs[0, L.REC_POS])
        pos = seg.base_offset + recs[:, L.REC_POS]
        bad = recs[:, L.REC_PHY] != pos
        if mismatch is None and bad.any():
            mismatch = int(recs[int(np.argmax(bad)), L.REC_POS])
        # Entries carry the PHYSICALOFFSET field; where a record lies there, filters go by its position.
        positions = entry_positions(buf, seg, recs, entries) if entries is not None and bad.any() else None
        keep = _keep(pos, recs[:, L.REC_STORE_TS], spec)
        if keep is not None and not keep.all():
            recs = recs[keep]
            if entries is not None:
                e_keep = _keep(numpy_of(entries.column("phy_offset")) if positions is None else positions,
                               numpy_of(entries.column("store_timestamp_ms")), spec)
                entries = entries.filter(arrow(e_keep))
                positions = None if positions is None else positions[e_keep]
            if not len(recs):
                continue
        records += len(recs)
        rollback += rollback_count(recs)
        if entries is not None:
            drop = first_entries_mask(entries, spec.from_offset, spec.skip_entries, positions)
            if drop is not None:
                entries = entries.filter(arrow(~drop))
                positions = None if positions is None else positions[~drop]
            indexed += int(np.count_nonzero(numpy_of(entries.column("entry_seq")) == 0))
            n_entries += entries.num_rows
        yield SplitChunk(seg, buf, recs, entries, positions)
    stop = reader.stop
    if first is None and stop.kind not in (STOP_RANGE_END, STOP_SEGMENT_END):
        first = stop.segment_offset  # the split's first record is the one it stopped on
    if stop.kind == STOP_RANGE_END and first is not None and stop.segment_offset < seg.size:
        # The chain leads into a later split's bytes: judge that record here, because a later split
        # resynchronises on the first *valid* record and would silently step over an invalid one.
        peeked = peek_stop(buf, seg, stop.segment_offset, spec.check_crc)
        if peeked is not None and peeked.kind != STOP_RANGE_END:
            stop = peeked
    return RangeInfo(rng.index, seg.path, seg.base_offset, seg.size, rng.start, rng.end, first,
                     stop.segment_offset, stop.kind, stop.reason, records, rollback, indexed, n_entries,
                     mismatch, usage.peak_rss_kb, usage.cpu_ms, reader_name())


def peek_stop(buf, seg: Segment, at: int, check_crc: bool) -> ReadStop | None:
    """The stop the record at ``at`` (a record start) makes, or None when it is a valid record."""
    gen = scan_records(buf, seg, at, at + 1, check_crc=check_crc, batch_records=1)
    while True:
        try:
            recs = next(gen)
        except StopIteration as done:
            return done.value
        if len(recs):
            return None


def _keep(pos, store_ts, spec: SplitSpec):
    """Mask of the records (or entries) the offset skips and the time range keep; None keeps all."""
    keep = ~skip_mask(pos, spec.skip_offsets) if spec.skip_offsets else None
    if spec.from_time_ms is not None or spec.to_time_ms is not None:
        in_time = np.ones(len(store_ts), bool)
        if spec.from_time_ms is not None:
            in_time &= store_ts >= spec.from_time_ms
        if spec.to_time_ms is not None:
            in_time &= store_ts < spec.to_time_ms
        keep = in_time if keep is None else keep & in_time
    return keep
