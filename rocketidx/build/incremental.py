"""Incremental builds: an output that holds a build of the same CommitLog is brought up to date from what changed.

In: the output's committed manifest (its ``incremental`` record: the settings that change bytes, and per
segment read its size, where the read ended and why, and CRCs of the 64 KiB before that end and of its first
64 KiB), the log as it is now, the build's settings. Out: a new committed version of the output, or the reason
a full build is needed (:func:`plan`).

How the log changed (:func:`find_change`): segments before the log's first one now went to retention; each
segment the earlier build read is the same up to where that read ended when its size allows it and its CRCs
match; reading starts at the first segment that is not the same (from its first byte), or where the earlier
read ended (a segment the broker appended to since, the next segment). The bytes read are those plus what the
files they touch need:

* the index, windowed: a window whose entries all lie before the log's first offset goes; a window with
  entries before it, or (a rewritten tail) at or past where reading starts, is built again from its entries,
  found through the time index (every block whose store times reach the window); every other window that gets
  new entries goes on from its last file (copied, then appended to), and its full files are carried;
* the index, one sequence (window 0, the broker's own layout): files a broker's retention deletes go (every
  file but the last whose endPhyOffset is below the log's first offset, up to the first that is not); a
  rewritten tail rebuilds from the first file holding an entry at or past where reading starts, read from
  its predecessor's last message on;
* the ConsumeQueues: a queue that gets new entries goes on from its last file; a rewritten tail cuts each
  queue where its first entry at or past the rewrite is (what the broker's recovery does); retention, in a
  windowed output, blanks each queue's slots before its first message still in the log (what a full build
  of the log writes), in a one-sequence output deletes the files a broker's retention deletes.

Stays true: files whose inputs did not change are hard links to the earlier version's (a copy where the
filesystem cannot link, said in the summary); a file that changes is written anew in the new version, never
linked and then written, so the earlier version stays intact until the new one is committed, and a kill
leaves it as it was. Where the rules above cannot be shown to give a full build's bytes (the broker's queue
rules dropped records, a record's PHYSICALOFFSET that is not its position, a queue whose first message left
is not at its own slot), the build is a full one and says why.
"""
from __future__ import annotations

import errno
import functools
import logging
import os
import shutil
import time
from dataclasses import dataclass, field

import numpy as np

from rocketidx.arrays import numpy_of
import rocketidx.layout as L
from rocketidx.build.finish import refuse_invalid_log
from rocketidx.build.log_record import KEY, record, settings_of
from rocketidx.build.summary import BuildSummary, manifest_header
from rocketidx.build.write import EntryBatch, WriterSizes, write_windows
from rocketidx.commitlog.dispatch import delay_levels_ms, dispatch
from rocketidx.commitlog.entries import entry_positions, rollback_count
from rocketidx.commitlog.keys import slot_of
from rocketidx.commitlog.readers import CommitLogReader, first_misplaced, peek_stop, read_range
from rocketidx.commitlog.records import STOP_BLANK, STOP_CORRUPT, STOP_END_OF_DATA, STOP_SEGMENT_END
from rocketidx.commitlog.segments import Segment, SegmentRange, open_segment
from rocketidx.commitlog.timeindex import DEFAULT_BLOCK_BYTES, BlockCollector, TimeIndexError, _fingerprint
from rocketidx.commitlog import timeindex
from rocketidx.config import BuildConfig
from rocketidx.consumequeue.placement import UNIT, QueueState
from rocketidx.consumequeue.writer import ConsumeQueueWriter, QueueInfo, file_name
from rocketidx.index.reader import Header
from rocketidx.index.windows import assign_windows, staging_name
from rocketidx.index.writer import FileInfo, WindowWriter
from rocketidx.output.local import LocalOutput, Staging, fsync_dir
from rocketidx.output.manifest import CONSUMEQUEUE_DIR, CURRENT, INDEX_DIR, Manifest, ManifestFile
import rocketidx.storage as storage

log = logging.getLogger(__name__)

UNKNOWN_TIME = -(2**62)  # a cut index file's end time while no entry has replaced it
_FINAL = (STOP_END_OF_DATA, STOP_CORRUPT)


# --- what changed ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    """How the log changed since the earlier build: its first offset then and now, where the earlier read
    ended, and where this one starts (``read_from``; at or past the log's end: nothing to read)."""

    old_first: int
    first: int
    old_end: int
    read_from: int
    log_end: int
    why: str
    unchanged: bool = False  # reading stops where it stopped before, the same way

    @property
    def rewritten(self) -> bool:
        """Bytes the earlier build read are not there any more (a crash restart rewrote the tail)."""
        return self.read_from < self.old_end

    @property
    def retention(self) -> bool:
        return self.first > self.old_first

    @property
    def nothing(self) -> bool:
        return not self.rewritten and not self.retention and (self.unchanged or self.read_from >= self.log_end)


def find_change(rows: list[dict], segments: list[Segment], check_crc: bool = True) -> Change:
    """Compare the earlier build's record of the log (``rows``) with the segments there now."""
    first = segments[0].base_offset if segments else 0
    log_end = segments[-1].end_offset if segments else 0
    old_first = rows[0]["base_offset"] if rows else first
    last = rows[-1] if rows else None
    old_end = last["base_offset"] + last["read_end"] if last else first
    now = {s.base_offset: s for s in segments}
    prev = None
    for r in rows:
        seg = now.get(r["base_offset"])
        if seg is None or seg.name != r["name"]:
            if seg is None and r["base_offset"] < first:
                continue  # retention removed it
            # The log was cut: what the earlier read went on to from the segment before is not there.
            at = prev["base_offset"] + prev["read_end"] if prev else r["base_offset"]
            return Change(old_first, first, old_end, at, log_end,
                          f"segment {r['name']} is gone from inside the log: read again from {at}")
        prev = r
        if seg.size < r["read_end"] or _fingerprint(open_segment(seg), r["read_end"]) != (r["head_crc"], r["tail_crc"]):
            return Change(old_first, first, old_end, r["base_offset"], log_end,
                          f"segment {r['name']} changed in the bytes read before: read again from its start")
        if r["kind"] in _FINAL:
            # Reading stopped here for good: judged again on the bytes there now, the same stop means that nothing
            # after it is read, now as then.
            at = r["read_end"]
            peeked = peek_stop(open_segment(seg), seg, at, check_crc) if at < seg.size else None
            same = peeked is not None and peeked.kind == r["kind"] if at < seg.size else \
                not any(s.base_offset > seg.base_offset for s in segments)
            return Change(old_first, first, old_end, seg.base_offset + at, log_end,
                          "the log ends where the earlier read ended" if same else
                          "read from where the earlier read ended", unchanged=same)
    after = [s.base_offset for s in segments if last is None or s.base_offset > last["base_offset"]]
    start = after[0] if after else log_end
    return Change(old_first, first, old_end, start, log_end,
                  "new segments" if after else "nothing changed")


def plan(previous: Manifest | None, config: BuildConfig, segments: list[Segment], *, filters: dict,
         remote_out: bool) -> tuple[Change | None, str]:
    """(the change to build from, '') when ``previous`` can be brought up to date, else (None, why a full
    build)."""
    if previous is None:
        return None, "the output holds no earlier build"
    if filters:
        return None, "a range build is not incremental"
    if remote_out:
        return None, "incremental builds of a URI output are not supported yet"
    rec = previous.header.get(KEY)
    if not rec:
        return None, "the earlier build's manifest does not record what an incremental build needs"
    if config.batch_queues:
        return None, "batch consume queues are built in full"
    if any(storage.is_remote(s.path) for s in segments):
        return None, "a CommitLog behind a URI is read in full"
    now = settings_of(config)
    differ = [k for k in now if rec["settings"].get(k) != now[k]]
    if differ:
        return None, "settings differ from the earlier build's: " + ", ".join(differ)
    if previous.header.get("phy_mismatch"):
        return None, "the earlier build met a record whose PHYSICALOFFSET is not its position"
    if previous.header.get("below_end_phy_offset_skipped"):
        return None, "the earlier build skipped entries below a file's endPhyOffset (store times out of order)"
    if not segments:
        return None, "the log has no segments"
    change = find_change(rec["log"], segments, config.check_crc)
    if change.read_from < change.first:
        return None, "retention removed segments the earlier build had not read"
    return change, ""


# --- the build --------------------------------------------------------------------------------------------------

class FullBuild(Exception):
    """The incremental rules cannot show this output's bytes: build it in full (the message says why)."""


@dataclass
class Reuse:
    """What the build carried and what it wrote, for the summary."""

    read_from: int = 0
    why: str = ""
    files_carried: int = 0
    files_written: int = 0
    windows_rebuilt: int = 0
    windows_dropped: int = 0
    bytes_read: int = 0
    queue_files_carried: int = 0
    queue_files_written: int = 0
    copied: int = 0  # carried files copied because a hard link was refused
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "extra"} | self.extra


# What a filesystem that refuses hard links says (across devices, on one that has none, a file's link limit).
_NO_LINKS = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


def carry(src: str, dst: str, reuse: Reuse) -> None:
    """``src`` into the new version as ``dst``: a hard link, a copy where the filesystem refuses links. Any other
    failure (``dst`` there already, no space) is raised: a copy would hide it."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        shutil.copyfile(src, dst)
        reuse.copied += 1


def _header(row: ManifestFile) -> Header:
    return Header(row.begin_timestamp, row.end_timestamp, row.begin_phy_offset, row.end_phy_offset,
                  row.hash_slot_count, row.index_count)


def _info(row: ManifestFile, staged: str, created: tuple[int, int]) -> FileInfo:
    return FileInfo(staged, row.window_id, row.window_start_ms, row.seq, _header(row), *created)


def copy_index_file(src: str, dst: str, hash_slot_num: int, index_count: int) -> None:
    """A new file with ``src``'s written bytes (header, slot table, items up to ``index_count``), sparse
    elsewhere as the writer leaves files: the last file of a window that an incremental build appends to."""
    size = os.path.getsize(src)
    used = L.items_offset(hash_slot_num) + index_count * L.INDEX_ITEM.itemsize
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        fo.truncate(size)
        storage.copy_range(fi.fileno(), fo.fileno(), 0, min(used, size), src)


class _OldIndex:
    """The earlier version's index files by window."""

    def __init__(self, manifest: Manifest, directory: str):
        self.directory = directory
        self.windows: dict[int, list[ManifestFile]] = {}
        for f in manifest.files:
            self.windows.setdefault(f.window_id, []).append(f)
        for rows in self.windows.values():
            rows.sort(key=lambda r: r.seq)

    def path(self, row: ManifestFile) -> str:
        return os.path.join(self.directory, row.name)

    def name_of(self, window: int, seq: int) -> str:
        return next(r.name for r in self.windows[window] if r.seq == seq)


def build_incremental(commitlog: str, out: str, config: BuildConfig, *, segments: list[Segment],
                      time_index: str | None, progress=None, threads: int = 1) -> tuple[dict, BuildSummary]:
    """Bring ``out`` up to date with the log (see the module docstring); :func:`plan` said it can be. Raises
    :class:`FullBuild` before anything is committed when the rules cannot show the bytes. ``threads``: the new
    bytes are scanned on this many (:func:`rocketidx.commitlog.readers.read_ahead`); the writing is one."""
    t0 = time.monotonic()
    output = LocalOutput(out)
    summary = BuildSummary(segments=len(segments))
    with output.lock():
        # Judged again under the lock: another build may have committed since the caller looked.
        previous = Manifest.read(out)
        change, why = plan(previous, config, segments, filters={}, remote_out=False)
        if change is None:
            raise FullBuild(why)
        if change.nothing and previous.header.get("commitlog") == manifest_header(config, segments, summary)["commitlog"]:
            # The log is as the earlier build read it: the committed version stays, untouched.
            summary.files, summary.entries = len(previous.files), sum(f.entries for f in previous.files)
            summary.windows = len({f.window_id for f in previous.files})
            summary.stop, summary.consumequeue = previous.header.get("stop"), previous.header.get("consumequeues")
            summary.wall_s = round(time.monotonic() - t0, 3)
            summary.incremental = Reuse(read_from=change.read_from, why="nothing changed",
                                        files_carried=len(previous.files)).as_dict()
            return previous.to_dict(), summary
        old_dir = os.path.join(output.out, os.readlink(os.path.join(output.out, CURRENT)))
        staging = output.new_staging()
        stop_threads: list = []  # what _build started that must end before its staging directory goes
        try:
            manifest, reuse = _build(output, staging.path, old_dir, previous, config, change, segments, summary,
                                     time_index, progress, t0, threads, stop_threads)
        except BaseException:
            for stop in stop_threads:
                stop()
            output.discard(staging)
            raise
    summary.incremental = reuse.as_dict()
    return manifest, summary


def _build(output: LocalOutput, staging: str, old_dir: str, previous: Manifest, config: BuildConfig,
           change: Change, segments: list[Segment], summary: BuildSummary, time_index: str | None, progress,
           t0: float, threads: int, stop_threads: list) -> tuple[dict, Reuse]:
    reuse = Reuse(read_from=change.read_from, why=("retention removed the log's oldest segments; " if change.retention
                                                   else "") + change.why)
    windowed = config.window_ms > 0
    old = _OldIndex(previous, os.path.join(old_dir, INDEX_DIR))
    index_dir = os.path.join(staging, INDEX_DIR)
    sizes = WriterSizes(config.hash_slot_num, config.index_num, config.window_ms)
    files: list[FileInfo] = []
    sources: dict[str, str] = {}
    fixed: dict[str, str] = {}
    # window -> (seq, header, the file to go on in or None, its seed, whether it is already in the new version)
    continuing: dict[int, tuple[int, Header, str | None, tuple[int, int], bool]] = {}
    rebuild: set[int] = set()
    kept_names: dict[int, dict[int, str]] = {}  # one sequence: the earlier build's files that stay, by seq
    if config.index:
        rebuild, dropped = _plan_windows(old, change, windowed, reuse)
        cut = _cut_sequence(old, change, segments, index_dir, config) if not windowed and change.rewritten else None
        for w, rows in old.windows.items():
            if w in rebuild or w in dropped:
                continue
            if cut is not None:
                rows = cut[0]
            kept = _broker_retention(rows, change.first) if not windowed and change.retention else rows
            if not kept:
                continue
            if not windowed:
                kept_names[w] = {r.seq: r.name for r in kept}
            last = kept[-1]
            prepared = cut is not None and last is cut[1]  # the cut file, already written in the new version
            # The last kept file, if not full, is copied (or was cut) and goes on taking entries; the full ones
            # are carried as they are.
            open_last = last.index_count < config.index_num
            k = rows.index(last)
            created = (rows[k - 1].end_phy_offset, rows[k - 1].end_timestamp) if k else (0, 0)
            for j, r in enumerate(rows):
                if r not in kept or (open_last and r is last):
                    continue
                staged = staging_name(w, r.seq, config.window_ms)
                if not (prepared and r is last):
                    carry(old.path(r), os.path.join(index_dir, staged), reuse)
                files.append(_info(r, staged, (rows[j - 1].end_phy_offset, rows[j - 1].end_timestamp) if j
                                   else (0, 0)))
                if not windowed:
                    fixed[staged] = r.name
            src = None if not open_last else os.path.join(index_dir, staging_name(w, last.seq, config.window_ms)) \
                if prepared else old.path(last)
            continuing[w] = (last.seq, _header(last), src, created, prepared) if open_last else \
                (last.seq + 1, _header(last), None, created, False)
        reuse.files_carried = len(files)
    started: set[int] = set()

    def start(wr: WindowWriter) -> None:
        c = continuing.get(wr.window_id)
        if c is None:
            return
        started.add(wr.window_id)
        seq, header, src, created, prepared = c
        if src is None:
            wr.continue_after(seq, header)
        else:
            path = os.path.join(wr.directory, staging_name(wr.window_id, seq, config.window_ms))
            if not prepared:
                copy_index_file(src, path, config.hash_slot_num, header.index_count)
            wr.continue_after(seq, header, path, created)

    queues = _Queues(previous, old_dir, staging, config, change, windowed, segments, reuse) if config.consumequeue \
        else None
    if queues is not None:
        stop_threads.append(queues.abort)
    tdir = time_index
    blocks = BlockCollector(DEFAULT_BLOCK_BYTES) if tdir else None
    reader = CommitLogReader([s for s in segments if s.end_offset > change.read_from], check_crc=config.check_crc,
                             batch_records=config.batch_records, start_offset=change.read_from,
                             on_records=blocks.add if blocks else None, start_at_record=True, threads=threads)
    lost = _seed_blocks(blocks, tdir, segments, change) if blocks is not None else None

    def batches():
        if config.index and rebuild:
            yield from _old_entries(segments, change, rebuild, config, tdir, reuse, threads)
        yield from _new_entries(reader, config, queues, summary, progress, reuse)

    written = list(write_windows(batches(), index_dir, sizes, max_open=4, start=start)) if config.index \
        else _drain(batches())
    for w in written:
        for f in w.files:
            files.append(f)
            if f.window_id in kept_names and f.seq in kept_names[f.window_id]:
                # One sequence: a file the earlier build made keeps its name (a name follows from the names before
                # it, and retention may have deleted those); the new ones are named after it, as a broker does.
                fixed[f.name] = kept_names[f.window_id][f.seq]
    reuse.files_written = sum(len(w.files) for w in written)
    for w, (seq, header, src, created, prepared) in continuing.items():
        if src is not None and w not in started:  # a not-full last file that got no entry: kept as it is
            staged = staging_name(w, seq, config.window_ms)
            if not prepared:
                carry(src, os.path.join(index_dir, staged), reuse)
                reuse.files_carried += 1
            files.append(FileInfo(staged, w, w * config.window_ms, seq, header, *created))
            if not windowed:
                fixed[staged] = old.name_of(w, seq)
    cut_left = [f for f in files if f.header.end_timestamp == UNKNOWN_TIME]
    if cut_left:
        raise FullBuild(f"the rewritten tail cuts index file {old.name_of(0, cut_left[0].seq)} after a message the "
                        f"log no longer holds, and no new entry replaces its end time")
    if reader.stop is None and change.read_from < change.log_end:
        raise FullBuild("the read of the new bytes ended without a stop")
    # As every build: a log whose first record is invalid is no log, and nothing is committed.
    refuse_invalid_log(segments, reader.stop.as_dict() if reader.stop else None)
    summary.stops = [s.as_dict() for s in reader.stops]
    summary.stop = reader.stop.as_dict() if reader.stop else previous.header.get("stop")
    new_bytes = sum(st.segment_offset - max(0, change.read_from - st.base_offset) for st in reader.stops)
    summary.bytes_read = reuse.bytes_read = new_bytes + reuse.extra.get("old_bytes_read", 0)
    summary.entries = sum(f.entries for f in files)
    summary.files = len(files)
    summary.windows = len({f.window_id for f in files})
    queue_manifest = queues.close() if queues is not None else None
    summary.wall_s = round(time.monotonic() - t0, 3)
    header = manifest_header(config, segments, summary)
    # The log's record: the segments before this read's first, as the earlier build recorded them (their
    # bytes are the same), then what this read saw.
    first_read = reader.stops[0].base_offset if reader.stops else change.log_end + 1
    kept_rows = [r for r in previous.header[KEY]["log"] if change.first <= r["base_offset"] < first_read]
    now = record(config, segments, summary.stops) if reader.stops else {"log": []}
    if now is None:
        raise FullBuild("a segment read could not be fingerprinted")
    header[KEY] = {"settings": settings_of(config), "log": kept_rows + now["log"]}
    if queue_manifest is not None:
        header["consumequeues"] = summary.consumequeue = queue_manifest
    header["reused"] = reuse.as_dict()
    for f in files:
        sources[f.name] = os.path.join(index_dir, f.name)
    manifest = output.commit(Staging(staging, staging), files, header, config.tzinfo, sources=sources,
                             fixed_names=fixed)
    if tdir:
        for seg in segments:
            if seg.base_offset == lost:  # half a segment's index would skip the other half: none is kept
                timeindex.index_path(tdir, seg).unlink(missing_ok=True)
        timeindex.keep(tdir, segments, blocks, [st for st in summary.stops if st["phy_offset"] - st["segment_offset"]
                                                != lost], config.check_crc)
    return manifest, reuse


def _drain(it) -> list:
    for _ in it:
        pass
    return []


def _broker_retention(rows: list[ManifestFile], first: int) -> list[ManifestFile]:
    """``IndexService.deleteExpiredFile``: every file but the last whose endPhyOffset is below the log's first
    offset goes, from the oldest up to the first that stays."""
    k = 0
    while k < len(rows) - 1 and rows[k].end_phy_offset < first:
        k += 1
    return rows[k:]


def _plan_windows(old: _OldIndex, change: Change, windowed: bool, reuse: Reuse) -> tuple[set[int], set[int]]:
    """The windows built again from the log, and those that go (windowed outputs)."""
    rebuild: set[int] = set()
    dropped: set[int] = set()
    if windowed:
        for w, rows in old.windows.items():
            if change.retention and rows[-1].end_phy_offset < change.first:
                dropped.add(w)
                continue
            if (change.retention and rows[0].begin_phy_offset < change.first) or \
                    (change.rewritten and rows[-1].end_phy_offset >= change.read_from):
                rebuild.add(w)
        reuse.windows_rebuilt, reuse.windows_dropped = len(rebuild), len(dropped)
    return rebuild, dropped


def _cut_sequence(old: _OldIndex, change: Change, segments: list[Segment], index_dir: str, config: BuildConfig
                  ) -> tuple[list[ManifestFile], ManifestFile | None] | None:
    """One sequence, a rewritten tail: the files as a build of the log up to ``read_from`` left them. Files
    whose entries all lie past it go; the first holding one past it is cut to its entries before it, written
    anew in ``index_dir`` (its staged name). Returns the rows of the files that stay, the cut one last with its
    new header, and that row (None: no file was cut); None: nothing to cut."""
    rows = old.windows.get(0, [])
    if not rows or rows[-1].end_phy_offset < change.read_from:
        return None
    k = next(i for i, r in enumerate(rows) if r.end_phy_offset >= change.read_from)
    row = rows[k]
    items = np.fromfile(old.path(row), L.INDEX_ITEM, count=row.index_count, offset=L.items_offset(config.hash_slot_num))
    m = int(np.searchsorted(items["phy_offset"][L.FIRST_INDEX:].astype(np.int64), change.read_from))
    if m == 0:
        return rows[:k], None  # the next entry opens a new file, as it did before
    end_phy = int(items["phy_offset"][m])
    # Its endTimestamp is the store time of its last message kept; where the log no longer holds that message it
    # is unknown, which matters only if no new entry is put in the file (the build checks: UNKNOWN_TIME).
    found = _record_at(segments, end_phy)
    end_ts = UNKNOWN_TIME if found is None else found[1]
    kept = items[:m + 1].copy()
    slot = slot_of(kept["key_hash"][1:].astype(np.int64), config.hash_slot_num)
    # Each slot holds its newest kept item; a put found its slot empty once per slot used (hashSlotCount).
    used, last_in_reverse = np.unique(slot[::-1], return_index=True)
    slots = np.zeros(config.hash_slot_num, L.SLOT)
    slots[used] = m - last_in_reverse
    header = Header(row.begin_timestamp, end_ts, row.begin_phy_offset, end_phy, len(used), m + 1)
    path = os.path.join(index_dir, staging_name(0, row.seq, config.window_ms))
    with open(path, "wb") as f:
        f.truncate(L.index_file_size(config.hash_slot_num, config.index_num))
        os.pwrite(f.fileno(), header.to_bytes(), 0)
        os.pwrite(f.fileno(), slots.tobytes(), L.slots_offset())
        os.pwrite(f.fileno(), kept.tobytes(), L.items_offset(config.hash_slot_num))
        f.flush()
        os.fdatasync(f.fileno())
    cut = ManifestFile(row.name, 0, row.window_start_ms, row.seq, header.begin_timestamp, end_ts,
                       header.begin_phy_offset, end_phy, len(used), m + 1, m)
    return rows[:k] + [cut], cut


def _record_at(segments: list[Segment], phy: int) -> tuple[np.void, int] | None:
    """The fixed first fields (:data:`rocketidx.layout.RECORD_PREFIX`) of the record at ``phy`` and its
    STORETIMESTAMP, or None when the log no longer holds it."""
    seg = next((s for s in segments if s.base_offset <= phy < s.end_offset), None)
    if seg is None:
        return None
    buf = open_segment(seg)
    at = phy - seg.base_offset
    prefix = np.frombuffer(buf, L.RECORD_PREFIX, 1, at)[0]
    at += L.RECORD_PREFIX.itemsize + (20 if int(prefix["sys_flag"]) & L.SYSFLAG_BORNHOST_V6 else 8)
    return prefix, int(np.frombuffer(buf, ">i8", 1, at)[0])


def _seed_blocks(blocks: BlockCollector, tdir: str, segments: list[Segment], change: Change) -> int | None:
    """The time index of the segment this read starts inside: its blocks before the start, from the index
    kept of it. Returns the base offset of that segment when its index cannot give them (then none is kept
    of it: one of half a segment would skip the rest)."""
    seg = next((s for s in segments if s.base_offset < change.read_from < s.end_offset), None)
    if seg is None:
        return None
    try:
        idx = timeindex.load(tdir, seg)
    except TimeIndexError:
        idx = None
    at = change.read_from - seg.base_offset
    if idx is None or idx.stop_offset != at or idx.block_bytes != blocks.block_bytes or \
            _fingerprint(open_segment(seg), at) != (idx.head_crc, idx.tail_crc):
        return seg.base_offset
    e = idx.entries
    have = np.flatnonzero(e["first"] >= 0)
    rows = np.stack([have, e["first"][have], e["min_ts"][have], e["max_ts"][have]], axis=1).astype(np.int64)
    blocks.absorb([{"base_offset": seg.base_offset, "block_bytes": idx.block_bytes, "data": rows.tobytes(),
                    "mismatch": idx.phy_mismatch_at}])
    return None


def _entry_batch(buf, seg: Segment, recs, entries, config: BuildConfig,
                 windows: set[int] | None = None) -> EntryBatch | None:
    positions = entry_positions(buf, seg, recs, entries)
    ts = numpy_of(entries.column("store_timestamp_ms"))
    w = assign_windows(ts, config.window_ms)
    phy = numpy_of(entries.column("phy_offset"))
    kh = numpy_of(entries.column("key_hash"))
    if windows is not None:
        keep = np.isin(w, np.fromiter(windows, np.int64, len(windows)))
        w, phy, kh, ts = w[keep], phy[keep], kh[keep], ts[keep]
        positions = None if positions is None else positions[keep]
    return EntryBatch(w, phy, kh, ts, positions) if len(w) else None


def _new_entries(reader: CommitLogReader, config: BuildConfig, queues, summary: BuildSummary, progress, reuse):
    delays = delay_levels_ms(config.delay_levels)
    chunks = reader.entry_chunks() if config.index else ((seg, buf, recs, None) for seg, buf, recs in
                                                         reader.record_chunks())
    for seg, buf, recs, entries in chunks:
        summary.messages += len(recs)
        if first_misplaced(seg, recs) is not None:
            raise FullBuild(f"a record in {seg.name} holds a PHYSICALOFFSET that is not its position")
        summary.rollback_skipped += rollback_count(recs)
        if queues is not None:
            queues.writer.add(seg, dispatch(buf, seg, recs, delays, config.light_queues))
        if entries is not None:
            b = _entry_batch(buf, seg, recs, entries, config)
            summary.messages_indexed += int(np.count_nonzero(numpy_of(entries.column("entry_seq")) == 0))
            if b is not None:
                yield b
        if progress:
            progress(reader)


def _old_entries(segments: list[Segment], change: Change, rebuild: set[int], config: BuildConfig,
                 tdir: str | None, reuse: Reuse, threads: int):
    """Entries the rebuilt windows need from before ``read_from``."""
    read = 0
    for p in _window_pieces(segments, change, rebuild, config, tdir):
        buf = open_segment(p.segment)
        chunks = read_range(buf, p, entries=True, threads=threads, check_crc=config.check_crc,
                            batch_records=config.batch_records)
        for recs, entries in chunks:
            if first_misplaced(p.segment, recs) is not None:
                raise FullBuild(f"a record in {p.segment.name} holds a PHYSICALOFFSET that is not its position")
            b = _entry_batch(buf, p.segment, recs, entries, config, rebuild)
            if b is not None:
                yield b
        stop = chunks.stop
        read += max(0, min(stop.segment_offset, p.end) - p.start) if stop else p.end - p.start
    reuse.extra["old_bytes_read"] = read


def _window_pieces(segments: list[Segment], change: Change, windows: set[int], config: BuildConfig,
                   tdir: str | None) -> list[SegmentRange]:
    """The pieces of ``[first, read_from)`` whose records may be in ``windows``: through the time index where it
    is usable, every byte where it is not."""
    lo_w = np.fromiter(windows, np.int64, len(windows))
    pieces = []
    for seg in segments:
        if seg.base_offset >= change.read_from:
            break
        end = min(seg.size, change.read_from - seg.base_offset)
        idx = None
        if tdir:
            try:
                idx = timeindex.load(tdir, seg)
            except TimeIndexError:
                idx = None
        # Usable when it covers every record the read before ``read_from`` meets in the segment: up to ``end``, or
        # to where the segment's records ended (a blank record, the segment's last byte).
        covers = idx is not None and (idx.stop_offset >= end or idx.stop_kind in (STOP_BLANK, STOP_SEGMENT_END))
        if not covers or idx.check_crc != config.check_crc or idx.base_offset != seg.base_offset or \
                _fingerprint(open_segment(seg), idx.stop_offset) != (idx.head_crc, idx.tail_crc):
            pieces.append(SegmentRange(seg, 0, end))
            continue
        e = idx.entries
        firsts = e["first"]
        has = firsts >= 0
        a = assign_windows(e["min_ts"], config.window_ms)
        b = assign_windows(e["max_ts"], config.window_ms)
        # A block is wanted when some wanted window lies between its least and greatest store time's.
        want = has & ((lo_w[None, :] >= a[:, None]) & (lo_w[None, :] <= b[:, None])).any(axis=1)
        k = 0
        n = len(e)
        while k < n:
            if not want[k]:
                k += 1
                continue
            j = k
            while j < n and (want[j] or not has[j]):
                j += 1
            stop_at = next((int(firsts[m]) for m in range(j, n) if has[m]), end)
            s = int(firsts[k])
            if s < end:
                pieces.append(SegmentRange(seg, s, min(stop_at, end)))
            k = j
    return pieces


# --- the ConsumeQueues ----------------------------------------------------------------------------------------

@dataclass
class _Rewrite:
    """A queue file of the new version made from the earlier version's ``src``: its first ``keep`` bytes (a
    rewritten tail cuts a queue at its last entry kept; the zeros after it stay a hole, as the writer leaves a
    file), with its first ``blank`` units blank (retention's fillPreBlank). Written as a kernel copy and one
    write of the blank units, so the file's bytes never pass through this process."""

    src: str
    size: int
    keep: int
    blank: int = 0

    def unit(self, at: int):
        """The unit at byte ``at`` of the file, as the new version holds it."""
        if at < self.blank * UNIT:
            return np.array([L.CQ_BLANK], L.CQ_UNIT)[0]
        if at >= self.keep:
            return np.zeros(1, L.CQ_UNIT)[0]
        with open(self.src, "rb") as f:
            return np.frombuffer(os.pread(f.fileno(), UNIT, at), L.CQ_UNIT)[0]

    def write(self, dst: str) -> None:
        with open(self.src, "rb") as fi, open(dst, "xb") as fo:
            fo.truncate(self.size)
            storage.copy_range(fi.fileno(), fo.fileno(), 0, self.keep, self.src)
            if self.blank:
                blank = np.empty(self.blank, L.CQ_UNIT)
                blank["phy_offset"], blank["size"], blank["tags_code"] = L.CQ_BLANK
                if os.pwrite(fo.fileno(), blank.view(np.uint8), 0) != blank.nbytes:
                    raise OSError(f"{dst}: short write of {self.blank} blank units")
            fo.flush()
            storage.start_writeback(fo.fileno())


class _Queues:
    """The earlier version's queues brought up to date: each queue's state after the rules for a rewritten tail
    and retention, its files carried or written anew, and the writer that appends the new bytes' entries."""

    def __init__(self, previous: Manifest, old_dir: str, staging: str, config: BuildConfig, change: Change,
                 windowed: bool, segments: list[Segment], reuse: Reuse):
        cq = previous.header.get("consumequeues") or {}
        self.file_size = config.queue_file_size
        self.old = os.path.join(old_dir, CONSUMEQUEUE_DIR)
        self.new = os.path.join(staging, CONSUMEQUEUE_DIR)
        self.reuse = reuse
        self.change = change
        dropped = cq.get("dropped") or {}
        self.dropped = dict(dropped)
        self.gaps = cq.get("gaps", 0)
        if change.rewritten and dropped.get("repeated"):
            raise FullBuild("the broker's rules dropped repeated queue offsets: a rewritten tail rebuilds the queues")
        if windowed and change.retention and (dropped.get("repeated") or dropped.get("below_max_physic_offset")):
            raise FullBuild("the broker's rules dropped records: retention rebuilds the queues")
        self.segments = segments
        # (topic, queue id) -> (state, files to carry, file name -> how it is written anew)
        self.base: dict[tuple[str, int], tuple[QueueState, list[str], dict[str, _Rewrite]]] = {}
        for q in cq.get("queues", []):
            b = self._base(q, windowed)
            if b is not None:
                self.base[(q["topic"], q["queue_id"])] = b
        self.writer = ConsumeQueueWriter(self.new, self.file_size, resume=self._resume)
        # Every file a queue gets anew (the one it appends to, copied; one cut or blanked) is made on threads while
        # the log is read (copies are the kernel's work), and the writer waits for a queue's files only when it
        # first writes to it (its entries wait in memory until then): every queue of a busy log gets entries in
        # the first batch, and waiting there for 40 copies in turn kept the read waiting 0.65 s. A queue that gets
        # no entry keeps the copy in place of a link: the same bytes. abort() or close() waits for the threads.
        self.ahead: dict[tuple[str, int], dict[str, object]] = {}
        self.maker = None
        self.written_anew: list[str] = []  # files made ahead, synced together in close
        for (topic, qid), (st, names, written) in self.base.items():
            made = {}
            for n in names:
                dst = os.path.join(self.new, topic, str(qid), n)
                if n in written:
                    made[n] = self._submit(_write_anew, dst, written[n])
                    self.written_anew.append(dst)
                elif n == self._appended(st):  # the writer appends to it: a copy, never the earlier version's file
                    made[n] = self._submit(_copy_started, os.path.join(self.old, topic, str(qid), n), dst)
            if made:
                self.ahead[(topic, qid)] = made

    def _submit(self, fn, *args):
        if self.maker is None:
            from concurrent.futures import ThreadPoolExecutor
            self.maker = ThreadPoolExecutor(8, thread_name_prefix="queue-files")
        return self.maker.submit(fn, *args)

    def _appended(self, st: QueueState) -> str | None:
        """The file the writer appends a queue's next entry to, when the queue has it already."""
        return file_name(st.write_pos - st.write_pos % self.file_size) if st.write_pos < st.files_end else None

    def _made(self, topic: str, qid: int) -> list[str]:
        """The queue's files made ahead, waited for here (so they are in place); their names."""
        made = self.ahead.pop((topic, qid), {})
        for future in made.values():
            future.result()
        self.reuse.queue_files_written += len(made)
        return list(made)

    def abort(self) -> None:
        """Stop making files ahead (the build failed: its staging directory is about to be removed)."""
        if self.maker is not None:
            self.maker.shutdown(wait=True, cancel_futures=True)

    def _rewrite(self, topic: str, qid: int, name: str, st: QueueState) -> _Rewrite:
        """A queue file of the earlier version, to be written anew with what it keeps of the queue (up to
        ``st``'s write position)."""
        src = os.path.join(self.old, topic, str(qid), name)
        size = os.path.getsize(src)
        return _Rewrite(src, size, min(size, max(0, st.write_pos - int(name))))

    def _unit(self, topic: str, qid: int, at: int, written: dict[str, _Rewrite]):
        """The unit at logical offset ``at`` (bytes), as this build holds it so far."""
        f = self.file_size
        name = file_name(at - at % f)
        if name in written:
            return written[name].unit(at % f)
        with open(os.path.join(self.old, topic, str(qid), name), "rb") as fh:
            return np.frombuffer(os.pread(fh.fileno(), UNIT, at % f), L.CQ_UNIT)[0]

    def _first_slot_at(self, topic, qid, st: QueueState, offset: int, written: dict[str, _Rewrite]) -> int | None:
        """The first slot from the queue's minimum whose entry's CommitLog offset is at or past ``offset`` (None:
        none is); a queue's entries come in CommitLog order, so a binary search finds it."""
        lo, hi = max(st.min_offset, st.first_file) // UNIT, st.slots
        if lo >= hi or int(self._unit(topic, qid, (hi - 1) * UNIT, written)["phy_offset"]) < offset:
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if int(self._unit(topic, qid, mid * UNIT, written)["phy_offset"]) < offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _base(self, q: dict, windowed: bool):
        topic, qid, names = q["topic"], q["queue_id"], list(q["files"])
        f = self.file_size
        st = QueueState(f, first_file=int(names[0]), files_end=int(names[-1]) + f, write_pos=q["max_offset"] * UNIT,
                        min_offset=q["min_offset"] * UNIT, entries=q["entries"])
        written: dict[str, _Rewrite] = {}
        ch = self.change
        if ch.rewritten:
            cut = self._first_slot_at(topic, qid, st, ch.read_from, written)
            if cut is not None:
                if cut * UNIT <= st.min_offset:
                    return None  # none of its entries is before the rewrite: it starts again
                st.entries -= st.slots - cut
                st.write_pos = cut * UNIT
                st.files_end = -(-st.write_pos // f) * f  # a file starting at the cut is made by its next entry
                names = [n for n in names if int(n) < st.files_end]
                at = st.write_pos - st.write_pos % f
                if at < st.files_end and file_name(at) in names:
                    written[file_name(at)] = self._rewrite(topic, qid, file_name(at), st)
        if ch.retention:
            if windowed:
                b = self._blank_before(topic, qid, names, st, written)
                if b is None:
                    return None
                names = b
            else:
                names = self._broker_deletes(topic, qid, names, written)
        # The first file it has (the writer lists its files from there); none left: where its next one begins.
        st.first_file = int(names[0]) if names else st.files_end
        if st.write_pos > st.min_offset:
            at = st.write_pos - UNIT
            if file_name(at - at % f) in names:
                last = self._unit(topic, qid, at, written)
                st.max_phy = int(last["phy_offset"]) + int(last["size"])
            else:
                # Its file went to retention: the entry ended at or before the rewrite, and any bound up to there
                # places every later record alike (they all end past it).
                st.max_phy = ch.read_from
        return st, names, written

    def _blank_before(self, topic, qid, names, st: QueueState, written: dict[str, _Rewrite]) -> list[str] | None:
        """Windowed retention: what a full build of the log writes, the slots before the first message still
        in it blank (fillPreBlank); None when no message of the queue is left."""
        t = self._first_slot_at(topic, qid, st, self.change.first, written)
        if t is None or t * UNIT >= st.write_pos:
            return None
        if t * UNIT <= st.min_offset:
            return names
        phy = int(self._unit(topic, qid, t * UNIT, written)["phy_offset"])
        found = _record_at(self.segments, phy)
        if topic.startswith(L.LMQ_PREFIX) or found is None or int(found[0]["queue_offset"]) != t or t == 0:
            raise FullBuild(f"queue {topic}/{qid}: its first message left is not at its own slot")
        f = self.file_size
        first_file = t * UNIT - (t * UNIT) % f
        st.entries -= t - st.min_offset // UNIT
        st.first_file, st.min_offset = first_file, t * UNIT
        name = file_name(first_file)
        if name not in written:
            written[name] = self._rewrite(topic, qid, name, st)
        written[name].blank = (t * UNIT - first_file) // UNIT
        return [n for n in names if int(n) >= first_file]

    def _broker_deletes(self, topic, qid, names, written) -> list[str]:
        """``deleteExpiredFileByOffset``: every file but the last whose last entry's offset is below the log's
        first offset goes, up to the first that stays."""
        k = 0
        last = self.file_size - UNIT
        while k < len(names) - 1:
            if int(self._unit(topic, qid, int(names[k]) + last, written)["phy_offset"]) >= self.change.first:
                break
            k += 1
        return names[k:]

    def _resume(self, topic: str, qid: int, queue) -> None:
        b = self.base.pop((topic, qid), None)
        if b is None:
            return
        st, names, written = b
        queue.state = st
        queue.created = st.files_end
        os.makedirs(queue.directory, exist_ok=True)
        ahead = self.ahead.get((topic, qid), {})
        if ahead:  # waited for at the queue's first write
            queue.pending = functools.partial(self._made, topic, qid)
        for n in names:
            if n not in ahead:
                carry(os.path.join(self.old, topic, str(qid), n), os.path.join(queue.directory, n), self.reuse)
                self.reuse.queue_files_carried += 1

    def close(self) -> dict:
        # The writer syncs every file of the queues it appended to, copies included.
        infos: list[QueueInfo] = list(self.writer.close())
        unsynced, dirs = [], []  # copies ahead of queues that got no entry after all; their directories
        for (topic, qid), (st, names, written) in sorted(self.base.items()):
            if not names:
                continue  # cut back to where its next file begins, and nothing came: no file
            qdir = os.path.join(self.new, topic, str(qid))
            made = self._made(topic, qid)
            unsynced += [os.path.join(qdir, n) for n in made if n not in written]
            for n in names:
                if n not in made:
                    carry(os.path.join(self.old, topic, str(qid), n), os.path.join(qdir, n), self.reuse)
                    self.reuse.queue_files_carried += 1
            dirs.append(qdir)
            infos.append(QueueInfo(topic, qid, names, st.min_offset // UNIT, st.slots, st.entries))
        self.abort()
        if self.ahead:  # every file made ahead is its queue's, in place: none may be left over
            raise FullBuild(f"a queue file made ahead was not used: {sorted(self.ahead)[:3]}")
        if os.path.isdir(self.new):
            dirs += [os.path.join(self.new, t) for t in os.listdir(self.new)]
        storage.sync_files(unsynced + self.written_anew, dirs)
        _sync_dir(self.new)  # after its topics' directories
        infos.sort(key=lambda q: (q.topic, q.queue_id))
        for k, v in self.writer.dropped.items():
            self.dropped[k] = self.dropped.get(k, 0) + v
        return {"file_size": self.file_size, "commitlog_min_offset": self.change.first,
                "queues": [q.as_dict() for q in infos], "entries": sum(q.entries for q in infos),
                "files": sum(len(q.files) for q in infos), "dropped": self.dropped,
                "gaps": self.gaps + self.writer.gaps}


def _copy_started(src: str, dst: str) -> None:
    """``src`` copied to ``dst`` in the kernel as it lies on disk (its written part; the sparse rest stays a
    hole), its writeback started: the queue writer's close syncs it with the queue's other files (and
    :meth:`close` those it never appended to), so the read that waits for the copy does not wait for the disk."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    storage.copy_sparse(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        storage.start_writeback(fd)
    finally:
        os.close(fd)


def _write_anew(dst: str, rewrite: _Rewrite) -> None:
    """A queue file written anew, its writeback started: synced with the others at :meth:`_Queues.close`."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    rewrite.write(dst)


def _sync_dir(path: str) -> None:
    if os.path.isdir(path):
        fsync_dir(path)
