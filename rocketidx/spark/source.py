"""The ``rocketmq-commitlog`` Spark data source: CommitLog segments -> split-wise Arrow batches.

In: a broker store (holding ``commitlog/``) or a CommitLog directory, local or any URI pyarrow.fs opens,
and string options (see :class:`SourceOptions`). Out, by ``output``:

* ``messages`` (default): one row per valid record, :data:`rocketidx.messages.MESSAGE_SCHEMA`;
* ``entries``: one row per index entry, ``(window, phy_offset, entry_seq, key_hash, store_timestamp_ms)``
  (:data:`ENTRY_ROWS`), in broker order within a split;
* ``stops``: one row per split saying where its reading ended and why (:data:`STOP_ROWS`);
* ``shuffle``: what the Spark build shuffles (:data:`SHUFFLE_ROWS`): one *bundle* row per window per
  decoded batch, holding that window's messages of the batch in CommitLog order as packed fixed-width
  columns (offsets, store times, entry counts, then every entry's key hash in entry order), plus each
  split's *info row* (``window`` null, ``info`` = :class:`RangeInfo` JSON) repeated ``stop_replicas``
  times with ``phy_offset`` numbering the copies. Key strings never leave the task.

Stays true:
* each segment is cut into byte ranges of ``split_bytes``; a task maps its segment and reads only the
  records that START in its range (the core :class:`RangeReader`, resynchronising on PHYSICALOFFSET),
  so no segment is ever one row or one task's memory;
* a split cannot know that an earlier split stopped for good, so what it reads is what it saw: its
  own stop ends it, and :func:`resolve_stops` turns every split's :class:`RangeInfo` into the broker's
  recovery view (the first final stop in CommitLog order, blank tails, counters) and checks that each
  split's first record is where the previous split's chain of TOTALSIZEs leads. A split whose chain
  runs into the next split's bytes peeks at that record, so an invalid record or a zero tail that
  starts exactly there is reported by the split that leads to it;
* the planner (``partitions()``) and ``read()`` keep no state: options are parsed once, into a frozen
  :class:`SourceOptions`; partitions are frozen :class:`RangePartition` values.
"""
from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Iterable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from rocketidx.errors import ConfigError, RocketIdxError, StoreLayoutError
from rocketidx.output import is_uri

log = logging.getLogger(__name__)

SOURCE_NAME = "rocketmq-commitlog"
OUTPUTS = ("messages", "entries", "stops", "shuffle")
DEFAULT_SPLIT_BYTES = 128 * 1024**2  # an HDFS block: ~8 tasks per 1 GiB segment
# A remote split fetches this much past its end: a record that starts in the split ends within it,
# since the broker caps a message at maxMessageSize = 4 MiB (a longer one triggers a full refetch).
REMOTE_MARGIN_BYTES = 8 * 1024**2

ENTRY_ROWS = pa.schema([
    ("window", pa.int64()),
    ("phy_offset", pa.int64()),
    ("entry_seq", pa.int32()),
    ("key_hash", pa.int32()),
    ("store_timestamp_ms", pa.int64()),
])

# A bundle row per (batch, window) rather than a row per entry: Spark's cost is per row (Arrow -> rows,
# shuffle, sort, rows -> Arrow), and on the 5.7 GB bench store that cost, at a row per message, was
# twice the whole core's CPU (19 s of JVM CPU against the core build's 11 s). A bundle carries the same
# fixed-width values; bundles of one window never overlap in offsets, so ordering them by
# (window, first offset) keeps every window's entries in CommitLog order.
SHUFFLE_ROWS = pa.schema([
    ("window", pa.int64()),  # null on info rows
    ("phy_offset", pa.int64()),  # the bundle's first message; on info rows the copy's number
    ("messages", pa.int32()),
    ("phy_offsets", pa.binary()),  # int64 little-endian, one per message
    ("store_timestamps_ms", pa.binary()),  # int64 little-endian, one per message
    ("entry_counts", pa.binary()),  # int32 little-endian, one per message (each makes at least one)
    ("key_hashes", pa.binary()),  # int32 little-endian, one per entry, in entry order
    ("info", pa.binary()),  # RangeInfo JSON on info rows, null otherwise
])

STOP_ROWS = pa.schema([
    ("range_index", pa.int32()),
    ("path", pa.string()),
    ("segment", pa.string()),
    ("base_offset", pa.int64()),
    ("segment_size", pa.int64()),
    ("range_start", pa.int64()),
    ("range_end", pa.int64()),
    ("first_record", pa.int64()),  # segment offset of the first record found, null when none starts here
    ("records", pa.int64()),
    ("rollback_skipped", pa.int64()),
    ("segment_offset", pa.int64()),  # where this split's reading ended
    ("phy_offset", pa.int64()),
    ("kind", pa.string()),
    ("reason", pa.string()),
    ("phy_mismatch_at", pa.int64()),  # first record whose PHYSICALOFFSET is not its position, or null
])

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


# --- options ------------------------------------------------------------------------------------

def parse_size(text: str | int, option: str) -> int:
    """``134217728``, ``128m``, ``64KiB``, ``1g``: a positive number of bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise ConfigError(option, text, "expected a byte size like 134217728, 128m or 1g")
        value = int(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower())
    if value <= 0:
        raise ConfigError(option, text, "must be positive")
    return value


def parse_time_ms(text: str | int, option: str) -> int:
    """Epoch milliseconds, or an ISO-8601 date-time (a time without a zone is taken as UTC)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    s = str(text).strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(option, text, "expected epoch milliseconds or an ISO-8601 date-time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    # Integer arithmetic: a float timestamp turns .123 s into 122.9999 ms.
    return (dt - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


def _int(options: Mapping[str, str], name: str, *, minimum: int | None = None) -> int | None:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw).strip().replace("_", ""))
    except ValueError:
        raise ConfigError(name, raw, "expected an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(name, raw, f"must be >= {minimum}")
    return value


def _int_list(options: Mapping[str, str], name: str) -> tuple[int, ...]:
    raw = str(options.get(name) or "").strip()
    if not raw:
        return ()
    try:
        return tuple(sorted(int(x) for x in raw.split(",") if x.strip()))
    except ValueError:
        raise ConfigError(name, raw, "expected comma-separated integers") from None


def _intervals(options: Mapping[str, str], name: str) -> tuple[tuple[int, int], ...]:
    raw = str(options.get(name) or "").strip()
    if not raw:
        return ()
    out = []
    for piece in raw.split(","):
        lo, sep, hi = piece.strip().partition("-")
        try:
            if not sep or int(lo) > int(hi):
                raise ValueError
            out.append((int(lo), int(hi)))
        except ValueError:
            raise ConfigError(name, raw, "expected comma-separated START-END absolute offsets") from None
    return tuple(sorted(out))


@dataclass(frozen=True)
class SourceOptions:
    """The data source's options, parsed once. Every option arrives as a string.

    ``path``            store or CommitLog directory (local path, or a URI pyarrow.fs opens)
    ``output``          messages | entries | stops
    ``from_offset``     absolute CommitLog offset: only records starting at or after it
    ``to_offset``       absolute CommitLog offset: only records starting before it
    ``from_time``       store time (epoch ms or ISO-8601): only messages stored at or after it
    ``to_time``         store time: only messages stored before it
    ``check_crc``       true (default) | false: check each body's CRC, as the broker's recovery does
    ``split_bytes``     bytes per split (default 128m)
    ``batch_records``   records decoded per Arrow batch (default 65536)
    ``window``          entries, shuffle: window length (1h, 15m, 0 = one window; default 1h)
    ``stop_replicas``   shuffle: copies of each split's info row (one per writer partition)
    ``whole_segments``  base offsets of segments read as one split (no resync inside them)
    ``skip_offsets``    ``START-END,...`` absolute offset intervals whose records are left out
    ``skip_entries``    entries, shuffle: drop the first N entries of the message at ``from_offset`` (a
                        backfill continues a file that already holds them)
    """

    path: str
    output: str = "messages"
    from_offset: int | None = None
    to_offset: int | None = None
    from_time_ms: int | None = None
    to_time_ms: int | None = None
    check_crc: bool = True
    split_bytes: int = DEFAULT_SPLIT_BYTES
    batch_records: int = 65536
    window_ms: int = 3_600_000
    stop_replicas: int = 1
    whole_segments: tuple[int, ...] = ()
    skip_offsets: tuple[tuple[int, int], ...] = ()
    skip_entries: int = 0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SourceOptions":
        from rocketidx.windows import parse_duration_ms
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        path = opts.get("path")
        if not path:
            raise ConfigError("path", path, "give the store or CommitLog directory: .load(PATH)")
        output = str(opts.get("output", "messages")).strip().lower()
        if output not in OUTPUTS:
            raise ConfigError("output", output, f"must be one of {', '.join(OUTPUTS)}")
        crc = str(opts.get("check_crc", "true")).strip().lower()
        if crc not in _TRUE | _FALSE:
            raise ConfigError("check_crc", opts.get("check_crc"), "expected true or false")
        parsed = cls(
            path=str(path),
            output=output,
            from_offset=_int(opts, "from_offset", minimum=0),
            to_offset=_int(opts, "to_offset", minimum=0),
            from_time_ms=parse_time_ms(opts["from_time"], "from_time") if opts.get("from_time") else None,
            to_time_ms=parse_time_ms(opts["to_time"], "to_time") if opts.get("to_time") else None,
            check_crc=crc in _TRUE,
            split_bytes=parse_size(opts.get("split_bytes", DEFAULT_SPLIT_BYTES), "split_bytes"),
            batch_records=_int(opts, "batch_records", minimum=1) or 65536,
            window_ms=parse_duration_ms(opts.get("window", "1h"), "window"),
            stop_replicas=_int(opts, "stop_replicas", minimum=1) or 1,
            whole_segments=_int_list(opts, "whole_segments"),
            skip_offsets=_intervals(opts, "skip_offsets"),
            skip_entries=_int(opts, "skip_entries", minimum=0) or 0,
        )
        if parsed.skip_entries and parsed.from_offset is None:
            raise ConfigError("skip_entries", parsed.skip_entries, "needs from_offset (the message it applies to)")
        if parsed.from_offset is not None and parsed.to_offset is not None and parsed.from_offset > parsed.to_offset:
            raise ConfigError("to_offset", parsed.to_offset, f"is before from_offset {parsed.from_offset}")
        if parsed.from_time_ms is not None and parsed.to_time_ms is not None and parsed.from_time_ms > parsed.to_time_ms:
            raise ConfigError("to_time", opts.get("to_time"), f"is before from_time {opts.get('from_time')}")
        return parsed

    def as_options(self) -> dict[str, str]:
        """The string options that parse back to this object (what a DataFrameReader takes)."""
        out = {"path": self.path, "output": self.output, "check_crc": str(self.check_crc).lower(),
               "split_bytes": str(self.split_bytes), "batch_records": str(self.batch_records),
               "window": str(self.window_ms), "stop_replicas": str(self.stop_replicas)}
        for name, value in (("from_offset", self.from_offset), ("to_offset", self.to_offset),
                            ("from_time", self.from_time_ms), ("to_time", self.to_time_ms)):
            if value is not None:
                out[name] = str(value)
        if self.whole_segments:
            out["whole_segments"] = ",".join(map(str, self.whole_segments))
        if self.skip_offsets:
            out["skip_offsets"] = ",".join(f"{lo}-{hi}" for lo, hi in self.skip_offsets)
        if self.skip_entries:
            out["skip_entries"] = str(self.skip_entries)
        return out


# --- segments on any filesystem -----------------------------------------------------------------

def list_store_segments(path: str, *, from_offset: int | None = None, to_offset: int | None = None):
    """The CommitLog's segments (:class:`rocketidx.segments.Segment`), local or through pyarrow.fs.

    A local path goes through the core's :func:`list_segments`; a URI is listed with the same checks
    (20-digit names, one size, no gaps), its segments' ``path`` keeping the URI.
    """
    from rocketidx.segments import SEGMENT_NAME, Segment, list_segments
    if not is_uri(path):
        return list_segments(path, from_offset=from_offset, to_offset=to_offset)
    import pyarrow.fs as pafs
    fs, root = pafs.FileSystem.from_uri(path)
    prefix = path[: len(path) - len(root)] if path.endswith(root) else path.split("://", 1)[0] + "://"
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise StoreLayoutError(path, "no such directory")
    if info.type != pafs.FileType.Directory:
        raise StoreLayoutError(path, "not a directory")
    sub = root.rstrip("/") + "/commitlog"
    if fs.get_file_info(sub).type == pafs.FileType.Directory:
        root = sub
    entries = sorted(fs.get_file_info(pafs.FileSelector(root)), key=lambda e: e.base_name)
    segments = []
    for e in entries:
        if e.type == pafs.FileType.Directory:
            continue
        full = prefix + e.path if not e.path.startswith(prefix) else e.path
        if not SEGMENT_NAME.match(e.base_name):
            raise StoreLayoutError(full, "not a CommitLog segment (name must be a 20-digit base offset); "
                                         "move it out of the CommitLog directory")
        segments.append(Segment(full, int(e.base_name), int(e.size)))
    if not segments:
        raise StoreLayoutError(path, "no CommitLog segments found")
    size = segments[0].size
    for prev, seg in zip(segments, segments[1:]):
        if prev.size != size or seg.size != size:
            bad = prev if prev.size != size else seg
            raise StoreLayoutError(bad.path, f"segment size {bad.size} differs from the first segment's "
                                             f"{size}; every segment has the same size")
        if seg.base_offset != prev.end_offset:
            raise StoreLayoutError(seg.path, f"gap in segment offsets: previous segment ends at "
                                             f"{prev.end_offset}, this one starts at {seg.base_offset}")
    if size == 0:
        raise StoreLayoutError(segments[0].path, "empty segment")
    if from_offset is not None:
        segments = [s for s in segments if s.end_offset > from_offset]
    if to_offset is not None:
        segments = [s for s in segments if s.base_offset < to_offset]
    return segments


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One split: bytes ``[start, end)`` (segment offsets) of one segment; ``index`` orders all splits."""

    index: int
    path: str
    base_offset: int
    size: int
    start: int
    end: int


def plan_partitions(segments, opts: SourceOptions) -> list[RangePartition]:
    """Cut the segments into splits of ``split_bytes``, clipped to ``[from_offset, to_offset)``."""
    whole = set(opts.whole_segments)
    parts: list[RangePartition] = []
    for seg in segments:
        lo = max(0, (opts.from_offset or 0) - seg.base_offset)
        hi = seg.size if opts.to_offset is None else min(seg.size, opts.to_offset - seg.base_offset)
        step = hi - lo if seg.base_offset in whole else opts.split_bytes
        for start in range(lo, hi, max(step, 1)):
            parts.append(RangePartition(len(parts), seg.path, seg.base_offset, seg.size, start,
                                        min(hi, start + step)))
    return parts


# --- what a split saw, and what all splits together mean ------------------------------------------

@dataclass(frozen=True)
class RangeInfo:
    """What one split's read saw: its first record, where it stopped and why, and its counters.

    ``first`` is the segment offset of the first record it found (None: no record starts in it);
    ``stop_*`` where its own reading ended (``range_end`` at the next record's start when the split's
    last record runs past its end and that record is valid). Counters cover the split's records,
    after the time filter.
    """

    index: int
    path: str
    base_offset: int
    size: int
    start: int
    end: int
    first: int | None
    stop_offset: int
    stop_kind: str
    stop_reason: str
    records: int = 0
    rollback: int = 0
    indexed: int = 0
    entries: int = 0
    phy_mismatch_at: int | None = None  # first record whose PHYSICALOFFSET is not its own offset
    worker_rss_kb: int = 0  # peak RSS of the Python worker that read the split, when it finished
    cpu_ms: int = 0  # CPU time the Python worker spent on this split

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> "RangeInfo":
        return cls(**json.loads(raw))

    @property
    def stop_dict(self) -> dict:
        return {"segment": self.path.rsplit("/", 1)[-1], "segment_offset": self.stop_offset,
                "phy_offset": self.base_offset + self.stop_offset, "kind": self.stop_kind,
                "reason": self.stop_reason}


@dataclass(frozen=True)
class ChainBreak:
    """A split whose first record is not where the previous split's chain of records leads."""

    path: str
    base_offset: int
    expected: int  # segment offset the chain leads to
    found: int | None  # what the split resynchronised on

    def __str__(self) -> str:
        return (f"{self.path} @ byte {self.expected}: the record chain continues here but the split "
                f"resynchronised at {self.found}")


@dataclass(frozen=True)
class ResolvedStops:
    """The broker-recovery view of all splits (what a sequential read from the first split would do).

    ``cut``: absolute offset of the first final stop (zero tail or invalid record), nothing at or after
    it counts; ``blanks``: ``(start, end)`` absolute intervals after a blank record, to the segment's
    end; ``stops``: each read segment's stop, as the core reader lists them; ``stop``: the last one.
    """

    cut: int | None
    blanks: tuple[tuple[int, int], ...]
    included: frozenset[int]
    stops: tuple[dict, ...]
    stop: dict | None
    bytes_read: int
    segments_read: int
    messages: int
    rollback: int
    indexed: int
    entries: int
    chain_breaks: tuple[ChainBreak, ...] = ()
    phy_mismatch: tuple[tuple[str, int], ...] = ()

    @property
    def skip_intervals(self) -> tuple[tuple[int, int], ...]:
        """Absolute ``[start, end)`` intervals whose records do not count (after the cut, after blanks)."""
        out = list(self.blanks)
        if self.cut is not None:
            out.append((self.cut, 2**63 - 1))
        return tuple(sorted(out))


_FINAL = ("end_of_data", "corrupt")


def resolve_stops(infos: Iterable[RangeInfo]) -> ResolvedStops:
    """Walk the splits in CommitLog order as the sequential reader would, following each chain.

    Within a segment the first split starts at a record (offset 0, or a resync at ``from_offset``);
    every later split must start where the previous one's chain leads, else a :class:`ChainBreak` is
    reported (the caller rereads that segment as one split). A blank stop ends the segment; a final
    stop ends reading for good. Only splits reached before those stops count.
    """
    by_segment: dict[int, list[RangeInfo]] = {}
    for info in {i.index: i for i in infos}.values():
        by_segment.setdefault(info.base_offset, []).append(info)
    cut = None
    blanks, stops, breaks, mismatch = [], [], [], []
    included: set[int] = set()
    bytes_read = messages = rollback = indexed = entries = segments_read = 0
    for base in sorted(by_segment):
        if cut is not None:
            break
        ranges = sorted(by_segment[base], key=lambda r: r.start)
        cont = None
        seg_stop: RangeInfo | None = None
        last = None
        for r in ranges:
            if seg_stop is not None:
                if r.first is not None and r.first < seg_stop.stop_offset:
                    breaks.append(ChainBreak(r.path, base, seg_stop.stop_offset, r.first))
                continue
            if cont is None:
                cont = r.first if r.first is not None else r.end
            if r.first is None:
                if cont < r.end:
                    breaks.append(ChainBreak(r.path, base, cont, None))
                last = r
                continue
            if r.first != cont:
                breaks.append(ChainBreak(r.path, base, cont, r.first))
            included.add(r.index)
            messages += r.records
            rollback += r.rollback
            indexed += r.indexed
            entries += r.entries
            if r.phy_mismatch_at is not None:
                mismatch.append((r.path, r.phy_mismatch_at))
            last = r
            if r.stop_kind == "range_end":
                cont = r.stop_offset
            else:
                seg_stop = r
        end = seg_stop or last
        if end is None:
            continue
        segments_read += 1
        stops.append(end.stop_dict)
        bytes_read += end.stop_offset
        if end.stop_kind == "blank":
            blanks.append((base + end.stop_offset, base + end.size))
        elif end.stop_kind in _FINAL:
            cut = base + end.stop_offset
    return ResolvedStops(cut, tuple(blanks), frozenset(included), tuple(stops), stops[-1] if stops else None,
                         bytes_read, segments_read, messages, rollback, indexed, entries, tuple(breaks),
                         tuple(mismatch))


def skip_mask(offsets, intervals: tuple[tuple[int, int], ...]):
    """True where an absolute offset falls in one of the sorted, disjoint ``[start, end)`` intervals."""
    import numpy as np
    if not intervals:
        return np.zeros(len(offsets), bool)
    lo = np.array([a for a, _ in intervals], np.int64)
    hi = np.array([b for _, b in intervals], np.int64)
    i = np.searchsorted(lo, offsets, side="right") - 1
    return (i >= 0) & (offsets < hi[np.maximum(i, 0)])


# --- reading one split ----------------------------------------------------------------------------

class _Segment:
    """A split's view of its segment: a read-only mapping of the local file, or of a local sparse copy
    of the bytes a remote split needs (``hi`` bounds what was fetched)."""

    def __init__(self, part: RangePartition, fetch_to: int | None = None):
        from rocketidx.messages import open_segment
        from rocketidx.segments import Segment
        self.seg = Segment(part.path, part.base_offset, part.size)
        self.complete = True
        if not is_uri(part.path):
            self.buf = open_segment(self.seg)
            self.hi = part.size
            return
        import mmap
        import pyarrow.fs as pafs
        fs, remote = pafs.FileSystem.from_uri(part.path)
        self.hi = part.size if fetch_to is None else min(part.size, fetch_to)
        local_dir = (os.environ.get("SPARK_LOCAL_DIRS") or tempfile.gettempdir()).split(",")[0]
        fd, tmp = tempfile.mkstemp(prefix="rocketidx-seg-", dir=local_dir)
        try:
            os.ftruncate(fd, part.size)  # sparse: bytes not fetched read as zeros and take no disk
            with fs.open_input_file(remote) as f:
                f.seek(part.start)
                pos = part.start
                while pos < self.hi:
                    chunk = f.read(min(8 * 1024**2, self.hi - pos))
                    if not chunk:
                        break
                    os.pwrite(fd, chunk, pos)
                    pos += len(chunk)
            self.buf = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
            os.unlink(tmp)  # the mapping keeps the bytes; the name must not outlive a killed task

    def close(self) -> None:
        # Arrow batches and numpy views may still point into the mapping: let them release it.
        self.buf = None


def _peek(buf, seg, at: int, check_crc: bool):
    """The stop the record at ``at`` (a record start) makes, or None when it is a valid record."""
    from rocketidx.messages import scan_records
    gen = scan_records(buf, seg, at, at + 1, check_crc=check_crc, batch_records=1)
    while True:
        try:
            recs = next(gen)
        except StopIteration as done:
            return done.value
        if len(recs):
            return None


def _read_split(part: RangePartition, opts: SourceOptions, want: str) -> Iterator:
    """Yield ``want`` (an output name; "stops" yields nothing) batches of one split; return its RangeInfo."""
    fetch_to = None if not is_uri(part.path) else part.end + REMOTE_MARGIN_BYTES
    while True:
        view = _Segment(part, fetch_to)
        try:
            info = yield from _read_view(view, part, opts, want)
        finally:
            view.close()
        if view.complete:
            return info
        # A remote split saw past what it fetched (a huge record, or a stop to be checked against the
        # rest of the segment): read it again with the whole rest. Nothing was yielded in that case.
        fetch_to = part.size


def _within(info: RangeInfo, view: "_Segment") -> bool:
    """Whether a remote split's read touched only fetched bytes (holes read as zeros, which could pass
    for a zero tail or fail a CRC). A final stop is always rechecked against the whole segment."""
    if view.hi >= info.size:
        return True
    if info.stop_kind in ("end_of_data", "corrupt"):
        return False
    at = info.stop_offset
    if info.stop_kind != "range_end" or info.first is None:
        return at + 8 <= view.hi
    if at + 4 > view.hi:
        return False
    total = int.from_bytes(view.buf[at:at + 4], "big", signed=True)
    return at + max(total, 8) <= view.hi


def _read_view(view: _Segment, part: RangePartition, opts: SourceOptions, want: str):
    import numpy as np
    from rocketidx import messages as M
    from rocketidx.entries import drop_first_entries, rollback_count
    from rocketidx.segments import SegmentRange
    from rocketidx.windows import assign_windows

    cpu0 = _cpu_ms()
    seg, buf = view.seg, view.buf
    remote = view.hi < part.size
    held: list[pa.RecordBatch] = []  # a partial remote fetch yields only once it proved sufficient
    reader = M.RangeReader(buf, SegmentRange(seg, part.start, part.end), check_crc=opts.check_crc,
                           batch_records=opts.batch_records)
    first = None
    records = rollback = indexed = n_entries = 0
    mismatch = None
    with_entries = want in ("entries", "shuffle")
    chunks = reader.entry_chunks() if with_entries else reader.record_chunks()
    for item in chunks:
        recs, entries = item if with_entries else (item, None)
        if first is None:
            first = int(recs[0, M.REC_POS])
        pos = seg.base_offset + recs[:, M.REC_POS]
        bad = recs[:, M.REC_PHY] != pos
        if mismatch is None and bad.any():
            mismatch = int(recs[int(np.argmax(bad)), M.REC_POS])
        keep = _keep(pos, recs[:, M.REC_STORE_TS], opts)
        if keep is not None and not keep.all():
            recs = recs[keep]
            if entries is not None:
                # PHYSICALOFFSET is the record's position here (a mismatch fails the build before it commits).
                e_keep = _keep(entries.column("phy_offset").to_numpy(),
                               entries.column("store_timestamp_ms").to_numpy(), opts)
                entries = entries.filter(pa.array(e_keep))
            if not len(recs):
                continue
        records += len(recs)
        rollback += rollback_count(recs)
        if want == "messages":
            batch = M.records_to_batch(buf, seg, recs)
        elif with_entries:
            entries = drop_first_entries(entries, opts.from_offset, opts.skip_entries)
            seq = entries.column("entry_seq").to_numpy()
            phy_e = entries.column("phy_offset").to_numpy()
            # A message's entries are adjacent and share its offset (its first may have been skipped).
            firsts = np.flatnonzero(np.concatenate(([True], phy_e[1:] != phy_e[:-1]))) if len(phy_e) else phy_e[:0]
            indexed += int(np.count_nonzero(seq == 0))
            n_entries += entries.num_rows
            ts = entries.column("store_timestamp_ms")
            window = assign_windows(ts.to_numpy(), opts.window_ms)
            if want == "entries":
                batch = pa.RecordBatch.from_arrays(
                    [pa.array(window), entries.column("phy_offset"), entries.column("entry_seq"),
                     entries.column("key_hash"), ts], schema=ENTRY_ROWS)
            else:
                batch = _shuffle_batch(entries, firsts, window)
        else:
            continue
        if remote:
            held.append(batch)
        else:
            yield batch
    stop = reader.stop
    if first is None and stop.kind not in (M.STOP_RANGE_END, M.STOP_SEGMENT_END):
        first = stop.segment_offset  # the split's first record is the one it stopped on
    if stop.kind == M.STOP_RANGE_END and first is not None and stop.segment_offset < seg.size:
        # The chain leads into a later split's bytes: judge that record here, because a later split
        # resynchronises on the first *valid* record and would silently step over an invalid one.
        peeked = _peek(buf, seg, stop.segment_offset, opts.check_crc)
        if peeked is not None and peeked.kind != M.STOP_RANGE_END:
            stop = peeked
    info = RangeInfo(part.index, part.path, part.base_offset, part.size, part.start, part.end, first,
                     stop.segment_offset, stop.kind, stop.reason, records, rollback, indexed, n_entries,
                     mismatch, _peak_rss_kb(), _cpu_ms() - cpu0)
    view.complete = not remote or _within(info, view)
    if remote and view.complete:
        yield from held
    if stop.kind == M.STOP_CORRUPT and view.complete:
        log.warning("reading %s stopped at byte %d: %s", part.path, stop.segment_offset, stop.reason)
    return info


def _shuffle_batch(entries: pa.RecordBatch, firsts, window) -> pa.RecordBatch:
    """Bundle rows of one decoded batch: its messages with entries, grouped by window (each group in
    CommitLog order). ``firsts``: where each message's (adjacent) entries start."""
    import numpy as np
    n = len(firsts)
    if n == 0:
        return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in SHUFFLE_ROWS], schema=SHUFFLE_ROWS)
    hashes = entries.column("key_hash").to_numpy().astype("<i4", copy=False)
    phy = entries.column("phy_offset").to_numpy()[firsts].astype("<i8", copy=False)
    ts = entries.column("store_timestamp_ms").to_numpy()[firsts].astype("<i8", copy=False)
    counts = np.diff(np.append(firsts, len(hashes))).astype("<i4")
    msg_window = window[firsts]
    if msg_window[0] == msg_window[-1] and (msg_window == msg_window[0]).all():  # the usual case
        groups = [np.arange(n)]
    else:
        order = np.argsort(msg_window, kind="stable")
        groups = np.split(order, np.flatnonzero(np.diff(msg_window[order])) + 1)
    rows = {f.name: [] for f in SHUFFLE_ROWS}
    for g in groups:
        rows["window"].append(int(msg_window[g[0]]))
        rows["phy_offset"].append(int(phy[g[0]]))
        rows["messages"].append(len(g))
        rows["phy_offsets"].append(phy[g].tobytes())
        rows["store_timestamps_ms"].append(ts[g].tobytes())
        rows["entry_counts"].append(counts[g].tobytes())
        rows["key_hashes"].append(hashes[_entry_indices(firsts[g], counts[g])].tobytes())
        rows["info"].append(None)
    return pa.RecordBatch.from_pydict(rows, schema=SHUFFLE_ROWS)


def _entry_indices(starts, counts):
    """The indices ``start, start+1, .., start+count-1`` of every (start, count), concatenated."""
    import numpy as np
    total = int(counts.sum())
    if len(starts) and starts[-1] + counts[-1] - starts[0] == total:  # contiguous: one slice
        return np.arange(starts[0], starts[0] + total)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return offsets + np.arange(total)


@dataclass(frozen=True)
class Bundle:
    """One bundle row unpacked: a window's messages (numpy arrays) and their entries' key hashes."""

    window: int
    phy_offsets: object  # int64 per message
    store_timestamps_ms: object  # int64 per message
    entry_counts: object  # int32 per message
    key_hashes: object  # int32 per entry

    @classmethod
    def from_row(cls, window: int, phy: bytes, ts: bytes, counts: bytes, hashes: bytes) -> "Bundle":
        import numpy as np
        return cls(window, np.frombuffer(phy, "<i8"), np.frombuffer(ts, "<i8"), np.frombuffer(counts, "<i4"),
                   np.frombuffer(hashes, "<i4"))

    def entries(self, keep=None):
        """``(phy_offset, key_hash, store_timestamp_ms)`` per entry, for the messages ``keep`` selects."""
        import numpy as np
        phy, ts, counts, hashes = self.phy_offsets, self.store_timestamps_ms, self.entry_counts, self.key_hashes
        if keep is not None and not keep.all():
            starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
            hashes = hashes[_entry_indices(starts[keep], counts[keep])]
            phy, ts, counts = phy[keep], ts[keep], counts[keep]
        return np.repeat(phy, counts), hashes, np.repeat(ts, counts)


def iter_bundles(batch: pa.RecordBatch):
    """The bundle rows of a ``shuffle`` batch (info rows skipped), as :class:`Bundle` values."""
    cols = [batch.column(c).to_pylist() for c in ("window", "phy_offsets", "store_timestamps_ms",
                                                   "entry_counts", "key_hashes")]
    for w, phy, ts, counts, hashes in zip(*cols):
        if w is not None:
            yield Bundle.from_row(w, phy, ts, counts, hashes)


def _peak_rss_kb() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cpu_ms() -> int:
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1000)


def _keep(pos, store_ts, opts: SourceOptions):
    """Mask of the records (or entries) the offset skips and the time range keep; None keeps all."""
    import numpy as np
    keep = ~skip_mask(pos, opts.skip_offsets) if opts.skip_offsets else None
    if opts.from_time_ms is not None or opts.to_time_ms is not None:
        in_time = np.ones(len(store_ts), bool)
        if opts.from_time_ms is not None:
            in_time &= store_ts >= opts.from_time_ms
        if opts.to_time_ms is not None:
            in_time &= store_ts < opts.to_time_ms
        keep = in_time if keep is None else keep & in_time
    return keep


def read_split(part: RangePartition, opts: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The batches ``opts.output`` asks for, for one split (what ``DataSourceReader.read`` yields)."""
    if opts.output == "stops":
        info = yield from _read_split(part, opts, "stops")
        yield _stop_batch(info)
        return
    info = yield from _read_split(part, opts, opts.output)
    if opts.output == "shuffle":
        n = opts.stop_replicas
        cols = {f.name: [None] * n for f in SHUFFLE_ROWS}
        cols.update(phy_offset=list(range(n)), info=[info.to_json()] * n)
        yield pa.RecordBatch.from_pydict(cols, schema=SHUFFLE_ROWS)


def _stop_batch(info: RangeInfo) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{
        "range_index": info.index, "path": info.path, "segment": info.path.rsplit("/", 1)[-1],
        "base_offset": info.base_offset, "segment_size": info.size, "range_start": info.start,
        "range_end": info.end, "first_record": info.first, "records": info.records,
        "rollback_skipped": info.rollback, "segment_offset": info.stop_offset, "phy_offset": info.base_offset + info.stop_offset,
        "kind": info.stop_kind, "reason": info.stop_reason, "phy_mismatch_at": info.phy_mismatch_at}],
        schema=STOP_ROWS)


def info_from_stop_row(row) -> RangeInfo:
    """A :class:`RangeInfo` back from a row of the ``stops`` output (counters other than records are 0)."""
    get = row.asDict() if hasattr(row, "asDict") else dict(row)
    return RangeInfo(get["range_index"], get["path"], get["base_offset"], get["segment_size"], get["range_start"],
                     get["range_end"], get["first_record"], get["segment_offset"], get["kind"], get["reason"],
                     get["records"], get["rollback_skipped"], phy_mismatch_at=get["phy_mismatch_at"])


# --- the Spark data source ------------------------------------------------------------------------

def spark_schema(output: str):
    from pyspark.sql.pandas.types import from_arrow_schema
    from rocketidx.messages import MESSAGE_SCHEMA
    return from_arrow_schema({"messages": MESSAGE_SCHEMA, "entries": ENTRY_ROWS, "stops": STOP_ROWS,
                              "shuffle": SHUFFLE_ROWS}[output])


class CommitLogDataSource(DataSource):
    """``spark.read.format("rocketmq-commitlog").option(...).load(PATH)``; options in :class:`SourceOptions`."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self):
        return spark_schema(self.opts.output)

    def reader(self, schema) -> "CommitLogReader":
        return CommitLogReader(self.opts)


class CommitLogReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        segments = list_store_segments(self.opts.path, from_offset=self.opts.from_offset,
                                       to_offset=self.opts.to_offset)
        return plan_partitions(segments, self.opts)

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        from rocketidx.spark.session import tune_python_worker
        from rocketidx.spark.source import read_split  # the worker imports the module, not the closure
        tune_python_worker()
        return read_split(partition, self.opts)


def register(spark) -> None:
    """Make ``spark.read.format("rocketmq-commitlog")`` available in this session (once per session)."""
    if getattr(spark, "_rocketidx_registered", False):
        return
    spark.dataSource.register(CommitLogDataSource)
    spark._rocketidx_registered = True


# --- the broker-recovery view of the messages -----------------------------------------------------

@dataclass(frozen=True)
class MessagesRead:
    """``read_messages``' answer: the DataFrame and how reading ended (``resolved.stop``, ``stops``)."""

    df: object
    resolved: ResolvedStops
    options: SourceOptions


def read_messages(spark, path: str, **options) -> MessagesRead:
    """Messages exactly as the broker's recovery reads them, at any split size (two passes).

    A first ``stops`` pass finds every split's stop; :func:`resolve_stops` gives the first final stop
    and blank tails (and segments whose splits disagree, which are then read as one split); the second
    pass reads the messages with those offsets left out. Options as :class:`SourceOptions`.
    """
    register(spark)
    opts = SourceOptions.parse(dict({k: str(v) for k, v in options.items() if v is not None}, path=path))
    resolved = resolve_split_stops(spark, opts)
    final = replace(opts, output="messages",
                    skip_offsets=tuple(sorted(set(opts.skip_offsets) | set(resolved.skip_intervals))))
    final = replace(final, whole_segments=resolved_whole(opts, resolved))
    if resolved.stop and resolved.stop["kind"] == "corrupt":
        log.warning("reading stopped for good at %s + %d: %s", resolved.stop["segment"],
                    resolved.stop["segment_offset"], resolved.stop["reason"])
    df = spark.read.format(SOURCE_NAME).options(**final.as_options()).load()
    return MessagesRead(df, resolved, final)


def resolved_whole(opts: SourceOptions, resolved: ResolvedStops) -> tuple[int, ...]:
    return tuple(sorted(set(opts.whole_segments) | {b.base_offset for b in resolved.chain_breaks}))


def resolve_split_stops(spark, opts: SourceOptions) -> ResolvedStops:
    """Run the ``stops`` pass and resolve it; segments with a chain break are reread as one split."""
    for _ in range(2):
        rows = (spark.read.format(SOURCE_NAME).options(**replace(opts, output="stops").as_options()).load()
                .collect())
        resolved = resolve_stops(info_from_stop_row(r) for r in rows)
        if not resolved.chain_breaks:
            return resolved
        log.warning("splits disagree on where records start (%s); reading those segments unsplit",
                    "; ".join(map(str, resolved.chain_breaks)))
        opts = replace(opts, whole_segments=resolved_whole(opts, resolved))
    raise RocketIdxError(f"split chain still broken after rereading whole segments: {resolved.chain_breaks}")
