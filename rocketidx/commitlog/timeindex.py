"""A sparse time index of a CommitLog: per segment, the store-time range of every block of N bytes.

In: the records arrays a read scans (:class:`BlockCollector` takes them as they pass, so a build keeps
the map for free), or a scan of its own (:func:`write_time_index`). Out: one ``<segment>.tix`` file per
segment in a directory of its own (by default ``OUT/_timeindex`` beside a build's output, never inside
a broker's ``store/index``, whose every file the broker opens as an IndexFile), and
:func:`plan_slice`: the byte pieces a ``--from-time/--to-time`` read must scan, with the
:class:`rocketidx.commitlog.splits.RangeInfo` of the bytes it may skip.

File layout (little-endian): ``RIDXTIX1``, a uint32 length and that many bytes of JSON metadata
(segment, base offset, size, block bytes, CRC setting, where and why the read of the segment stopped,
the first PHYSICALOFFSET mismatch, CRCs of the segment's first and last 64 KiB before the stop, a
CRC of the entries), padding to 8 bytes, then one fixed-width entry per block ``k``: the position of
the first record starting in ``[k*N, (k+1)*N)`` (-1: none) and the least and greatest store time of
the records starting there.

Why min and max per block, not Kafka's one timestamp: a clock that steps back puts a record of an
earlier window after later ones, and a slice must still find it. A block is skipped only when no
record starting in it can be in the slice, so skipping never changes a result: every record the
slice keeps is in a scanned piece, and the skipped bytes' counters (records kept by the filter,
entries) are zero by construction. The read stops are the index's, checked against the file: the
fingerprints must match and a final stop (zero tail, invalid record) is re-judged on the bytes now
there, so a segment the broker appended to since is read from where the index ends.
"""
from __future__ import annotations

import json
import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rocketidx.commitlog.records import STOP_RANGE_END
from rocketidx.commitlog.segments import Segment, SegmentRange, open_segment
# Where a build keeps it and what its default means are settings (rocketidx.config.time_index_dir).
from rocketidx.config import TIME_INDEX_AUTO as AUTO, TIME_INDEX_DIR_NAME as DIR_NAME  # noqa: F401
from rocketidx.errors import CorruptRecordError, RocketIdxError
import rocketidx.layout as L
from rocketidx.storage import is_uri

log = logging.getLogger(__name__)

MAGIC = b"RIDXTIX1"
SUFFIX = ".tix"
DEFAULT_BLOCK_BYTES = 1024**2
FINGERPRINT_BYTES = 64 * 1024
ENTRY = np.dtype([("first", "<i8"), ("min_ts", "<i8"), ("max_ts", "<i8")])
_FINAL = ("end_of_data", "corrupt")


class TimeIndexError(CorruptRecordError):
    """A time index file that cannot be read as the format says."""


def _fingerprint(buf, stop: int) -> tuple[int, int]:
    head = bytes(buf[:min(stop, FINGERPRINT_BYTES)])
    tail = bytes(buf[max(0, stop - FINGERPRINT_BYTES):stop])
    return zlib.crc32(head), zlib.crc32(tail)


class BlockCollector:
    """Collects per-block (first record, least and greatest store time) of the records a read scans.

    Feed it records arrays of a segment in any order and any number of times (a block seen twice
    merges); :meth:`blocks` gives one segment's table.
    """

    def __init__(self, block_bytes: int = DEFAULT_BLOCK_BYTES):
        if block_bytes <= 0:
            raise RocketIdxError(f"time index block size must be positive, got {block_bytes}")
        self.block_bytes = block_bytes
        self._parts: dict[int, list[np.ndarray]] = {}
        self.mismatch: dict[int, int] = {}  # base offset -> first record whose PHYSICALOFFSET is not its own

    def add(self, seg: Segment, recs: np.ndarray) -> None:
        if not len(recs):
            return
        pos = recs[:, L.REC_POS]
        ts = recs[:, L.REC_STORE_TS]
        block = pos // self.block_bytes
        starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
        part = np.stack([block[starts], pos[starts], np.minimum.reduceat(ts, starts),
                         np.maximum.reduceat(ts, starts)], axis=1)
        self._parts.setdefault(seg.base_offset, []).append(part)
        bad = recs[:, L.REC_PHY] != seg.base_offset + pos
        if bad.any():
            at = int(pos[int(np.argmax(bad))])
            self.mismatch[seg.base_offset] = min(at, self.mismatch.get(seg.base_offset, at))

    def segments(self) -> list[int]:
        return sorted(self._parts)

    def merged(self, base_offset: int) -> np.ndarray:
        """(block, first, min_ts, max_ts) rows, one per block seen, in block order."""
        parts = self._parts.get(base_offset)
        if not parts:
            return np.zeros((0, 4), np.int64)
        rows = np.concatenate(parts)
        rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
        starts = np.flatnonzero(np.r_[True, rows[1:, 0] != rows[:-1, 0]])
        return np.stack([rows[starts, 0], rows[starts, 1], np.minimum.reduceat(rows[:, 2], starts),
                         np.maximum.reduceat(rows[:, 3], starts)], axis=1)

    def to_rows(self) -> list[dict]:
        """Picklable rows for a task's output (see :meth:`absorb`)."""
        return [{"base_offset": b, "block_bytes": self.block_bytes,
                 "data": self.merged(b).astype(np.int64).tobytes(), "mismatch": self.mismatch.get(b)}
                for b in self.segments()]

    def absorb(self, rows: list[dict]) -> None:
        for r in rows:
            if r["block_bytes"] == self.block_bytes:
                self._parts.setdefault(r["base_offset"], []).append(
                    np.frombuffer(r["data"], np.int64).reshape(-1, 4))
                if r["mismatch"] is not None:
                    m = self.mismatch.get(r["base_offset"], r["mismatch"])
                    self.mismatch[r["base_offset"]] = min(m, r["mismatch"])


@dataclass
class SegmentTimeIndex:
    """One segment's time index: its metadata and its block entries."""

    segment: str
    base_offset: int
    size: int
    block_bytes: int
    check_crc: bool
    stop_offset: int
    stop_kind: str
    stop_reason: str
    phy_mismatch_at: int | None
    head_crc: int
    tail_crc: int
    entries: np.ndarray  # ENTRY records, one per block up to the stop

    def meta(self) -> dict:
        return {"segment": self.segment, "base_offset": self.base_offset, "size": self.size,
                "block_bytes": self.block_bytes, "check_crc": self.check_crc,
                "stop": {"offset": self.stop_offset, "kind": self.stop_kind, "reason": self.stop_reason},
                "phy_mismatch_at": self.phy_mismatch_at, "head_crc": self.head_crc, "tail_crc": self.tail_crc,
                "blocks": len(self.entries), "entries_crc": zlib.crc32(self.entries.tobytes())}

    def to_bytes(self) -> bytes:
        meta = json.dumps(self.meta(), separators=(",", ":")).encode()
        head = MAGIC + len(meta).to_bytes(4, "little") + meta
        return head + b"\0" * (-len(head) % 8) + self.entries.tobytes()

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> "SegmentTimeIndex":
        if raw[:8] != MAGIC or len(raw) < 12:
            raise TimeIndexError(where, 0, "not a rocketidx time index (bad magic)")
        n = int.from_bytes(raw[8:12], "little")
        try:
            meta = json.loads(raw[12:12 + n])
            at = 12 + n + (-(12 + n) % 8)
            entries = np.frombuffer(raw, ENTRY, meta["blocks"], at)
            stop = meta["stop"]
            if zlib.crc32(entries.tobytes()) != meta["entries_crc"]:
                raise TimeIndexError(where, at, "entries do not match their CRC")
            return cls(meta["segment"], meta["base_offset"], meta["size"], meta["block_bytes"], meta["check_crc"],
                       stop["offset"], stop["kind"], stop["reason"], meta["phy_mismatch_at"], meta["head_crc"],
                       meta["tail_crc"], entries)
        except (ValueError, KeyError, TypeError) as e:
            raise TimeIndexError(where, 12, f"unreadable metadata or entries: {e}") from None

    @classmethod
    def from_blocks(cls, seg: Segment, buf, blocks: np.ndarray, block_bytes: int, check_crc: bool, stop: dict,
                    mismatch: int | None) -> "SegmentTimeIndex":
        """From a :class:`BlockCollector`'s merged rows and the read's stop of this segment."""
        end = stop["segment_offset"]
        n = -(-end // block_bytes)
        entries = np.zeros(n, ENTRY)
        entries["first"] = -1
        blocks = blocks[blocks[:, 1] < end]
        if len(blocks) and blocks[-1, 0] >= n:
            raise RocketIdxError(f"{seg.path}: time index blocks past the read's stop at {end}")
        entries["first"][blocks[:, 0]] = blocks[:, 1]
        entries["min_ts"][blocks[:, 0]] = blocks[:, 2]
        entries["max_ts"][blocks[:, 0]] = blocks[:, 3]
        head, tail = _fingerprint(buf, end)
        return cls(seg.name, seg.base_offset, seg.size, block_bytes, check_crc, end, stop["kind"], stop["reason"],
                   mismatch if mismatch is not None and mismatch < end else None, head, tail, entries)

    def same(self, other: "SegmentTimeIndex") -> bool:
        return self.meta() == other.meta()


def index_path(directory: str | os.PathLike, seg: Segment) -> Path:
    return Path(directory) / (seg.name + SUFFIX)


def save(directory: str | os.PathLike, idx: SegmentTimeIndex) -> Path:
    """Write one segment's index (temporary file, fsync, rename: a reader never sees half of one)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / (idx.segment + SUFFIX)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(idx.to_bytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load(directory: str | os.PathLike, seg: Segment) -> SegmentTimeIndex | None:
    p = index_path(directory, seg)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        return None
    return SegmentTimeIndex.from_bytes(raw, str(p))


def save_collected(directory: str | os.PathLike, segments: list[Segment], collector: BlockCollector,
                   stops: list[dict], check_crc: bool) -> int:
    """Write the index of every segment a read covered from its first byte to its stop (``stops``: the
    read's per-segment stops, as :class:`rocketidx.build.summary.BuildSummary` lists them). Returns how many."""
    by_name = {s.name: s for s in segments}
    written = 0
    for stop in stops:
        seg = by_name.get(stop["segment"])
        if seg is None or is_uri(seg.path):
            continue
        buf = open_segment(seg)
        idx = SegmentTimeIndex.from_blocks(seg, buf, collector.merged(seg.base_offset), collector.block_bytes,
                                           check_crc, stop, collector.mismatch.get(seg.base_offset))
        try:
            old = load(directory, seg)
        except TimeIndexError:
            old = None  # damaged: the fresh one replaces it
        if old is None or not old.same(idx):
            save(directory, idx)
            written += 1
    return written


def keep(directory: str | os.PathLike | None, segments: list[Segment], collector: BlockCollector | None,
         stops: list[dict], check_crc: bool) -> None:
    """A build's end: :func:`save_collected`, where a failure to keep the index is a warning, never the
    build's failure (the index only ever speeds a later read up)."""
    if not directory or collector is None:
        return
    try:
        save_collected(directory, segments, collector, stops, check_crc)
    except OSError as e:
        log.warning("could not keep the time index in %s: %s", directory, e)


def scan_segments(segments: list[Segment], *, block_bytes: int = DEFAULT_BLOCK_BYTES, check_crc: bool = True,
                  progress=None) -> list[SegmentTimeIndex]:
    """Read the segments as the broker's recovery does (structure and, by default, CRC) and index them."""
    from rocketidx.commitlog.readers import CommitLogReader
    collector = BlockCollector(block_bytes)
    reader = CommitLogReader(segments, check_crc=check_crc, on_records=collector.add)
    for _ in reader.record_chunks():
        if progress:
            progress(reader)
    by_name = {s.name: s for s in segments}
    out = []
    for stop in reader.stops:
        seg = by_name[stop.path.rsplit("/", 1)[-1]]
        out.append(SegmentTimeIndex.from_blocks(seg, open_segment(seg), collector.merged(seg.base_offset),
                                                block_bytes, check_crc, stop.as_dict(),
                                                collector.mismatch.get(seg.base_offset)))
    return out


# --- using it ---------------------------------------------------------------------------------------

# Skipped ranges' RangeInfo indices start here, clear of any plan's piece numbers.
SKIPPED_INDEX_BASE = 1 << 40


@dataclass
class SlicePlan:
    """What a time slice reads: ``pieces`` (segment ranges to scan, each starting at a record, in
    CommitLog order) and ``skipped`` (:class:`RangeInfo` of the bytes left out, counters zero)."""

    pieces: list[SegmentRange]
    skipped: list
    blocks: int
    blocks_read: int

    @property
    def bytes(self) -> int:
        return sum(p.end - p.start for p in self.pieces)


def _usable(idx: SegmentTimeIndex | None, seg: Segment, check_crc: bool) -> str | None:
    """Why this segment's index cannot serve this read, or None."""
    if idx is None:
        return "no time index"
    if (idx.base_offset, idx.size) != (seg.base_offset, seg.size):
        return "indexes another segment"
    if idx.check_crc != check_crc:
        return f"made with check_crc={idx.check_crc}"
    if idx.stop_offset > seg.size:
        return "its stop lies past the segment's end"
    if _fingerprint(open_segment(seg), idx.stop_offset) != (idx.head_crc, idx.tail_crc):
        return "the segment's bytes changed"
    return None


def plan_slice(segments: list[Segment], directory: str | os.PathLike, from_ms: int | None, to_ms: int | None,
               check_crc: bool) -> tuple[SlicePlan | None, str]:
    """The pieces a read of store times ``[from_ms, to_ms)`` of these whole segments must scan, or
    (None, why not) when some segment has no usable index (the caller then reads everything)."""
    from rocketidx.commitlog.splits import RangeInfo
    from rocketidx.commitlog.readers import peek_stop
    lo = -2**63 if from_ms is None else from_ms
    hi = 2**63 - 1 if to_ms is None else to_ms
    pieces: list[SegmentRange] = []
    skipped: list[tuple[Segment, int, int, str, str, int | None]] = []  # seg, a, b, stop kind, reason, mismatch
    blocks = blocks_read = 0
    for seg in segments:
        try:
            idx = load(directory, seg)
        except TimeIndexError as e:
            return None, str(e)
        why = _usable(idx, seg, check_crc)
        if why:
            return None, f"{seg.name}: {why}"
        e = idx.entries
        stop_kind, stop_reason, live = idx.stop_kind, idx.stop_reason, False
        if stop_kind in _FINAL:
            # Re-judge the stop on the bytes there now: the broker may have appended since.
            peeked = peek_stop(open_segment(seg), seg, idx.stop_offset, check_crc) if idx.stop_offset < seg.size else None
            if peeked is None and idx.stop_offset < seg.size:
                live = True
            elif peeked is not None:
                stop_kind, stop_reason = peeked.kind, peeked.reason
        nonempty = e["first"] >= 0
        want = nonempty & (e["max_ts"] >= lo) & (e["min_ts"] < hi)
        blocks += len(e)
        blocks_read += int(want.sum())
        firsts = e["first"][nonempty]
        # Boundaries between runs fall at the first record of a block: intervals of whole records.
        wn = want[nonempty]
        change = np.flatnonzero(wn[1:] != wn[:-1]) + 1
        cuts = [0] + firsts[change].tolist() + [idx.stop_offset]
        marks = wn[np.r_[0, change]].tolist() if len(firsts) else []
        for k, w in enumerate(marks):
            a, b = cuts[k], cuts[k + 1]
            last = k == len(marks) - 1
            if w:
                pieces.append(SegmentRange(seg, a, seg.size if last else b))
            elif last and not live:
                skipped.append((seg, a, b, stop_kind, stop_reason, idx.phy_mismatch_at))
            else:
                skipped.append((seg, a, b, STOP_RANGE_END, "skipped by the time index", idx.phy_mismatch_at))
        if not marks and not live:  # no record starts before the stop
            skipped.append((seg, 0, idx.stop_offset, stop_kind, stop_reason, None))
        if live and not (pieces and pieces[-1].segment == seg and pieces[-1].end == seg.size):
            pieces.append(SegmentRange(seg, idx.stop_offset, seg.size))
        if not live and stop_kind in _FINAL:
            break  # the broker's recovery reads no further
    infos = [RangeInfo(SKIPPED_INDEX_BASE + k, seg.path, seg.base_offset, seg.size, a, b, a, b, kind, reason,
                       phy_mismatch_at=mm if mm is not None and a <= mm < b else None)
             for k, (seg, a, b, kind, reason, mm) in enumerate(skipped)]
    return SlicePlan(pieces, infos, blocks, blocks_read), ""
