"""IndexFiles (+ CommitLog) -> a list of problems: the offline index sanity check.

In: a directory of IndexFiles (a build output or a broker's ``store/index``), their sizes, and
optionally the CommitLog they index. Out: a :class:`VerifyReport` with every :class:`Problem` (file,
byte offset, kind, detail) and per-file summaries; exit code 0 clean, 1 problems found, 2 could not run.

Structure (per file, vectorised over its items): size = 40 + 4*slots + 20*indexNum; header counts in
range; every slot value and prevIndex in ``[0, indexCount)``; chains strictly decreasing (so no cycle);
each item reachable from exactly one slot and its keyHash mapping to that slot; hashSlotCount equal to the
non-empty slots; item 0 and everything past indexCount zero; header offsets equal the first/last item's,
offsets in CommitLog order, the last item's time diff consistent with the header's times.
Content (with the CommitLog): every item's phyOffset starts a valid message that makes an entry with the
item's keyHash, its time diff agrees with that message's store time; and coverage: the entries the
CommitLog implies over the indexed offset range are all present (as a multiset), with none extra, and in
a windowed build output each file holds only its window's entries. These rules live in
:func:`judge_content`, which judges one stretch of offsets: :func:`verify_index` calls it per CommitLog
chunk, :mod:`rocketidx.spark.verify` per range group.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rocketidx.arrays import unique_sorted
from rocketidx.commitlog.keys import slot_of
from rocketidx.errors import StoreLayoutError, CorruptIndexError
from rocketidx.index.reader import IndexFile
from rocketidx.index.writer import time_diffs
import rocketidx.layout as L
from rocketidx.output.manifest import Manifest
from rocketidx.output.open import open_index_dir
import rocketidx.storage as storage
from rocketidx.verify.coverage import GapTally, add_gap_problems, log_gaps
from rocketidx.verify.content import ContentParams, EntryRows, Found, ItemRows, describe, judge_content
from rocketidx.verify.report import (CROSS_FILE_KINDS, FileSummary, MAX_LISTED_PER_KIND, PER_FILE_KINDS, Problem, VerifyReport, listing_order)


def check_structure(f: IndexFile, report: VerifyReport) -> dict | None:
    """Structure checks of one file; returns its items as arrays for the content checks."""
    name = f.path
    h = f.header
    S, N = f.hash_slot_num, f.index_num
    items_at = L.items_offset(S)
    item_size = L.INDEX_ITEM.itemsize
    hdr = L.INDEX_HEADER.fields
    if not (L.FIRST_INDEX <= h.index_count <= N):
        report.add(name, hdr["index_count"][1], "header",
                   f"indexCount {h.index_count} outside [1, {N}]; items not checked")
        return None
    c = h.index_count
    slots = np.asarray(f.slots, dtype=np.int64)
    # Fields in their own widths (no structured copy, no int64 widening), read in chunks by the one item
    # reader: 20 bytes an item plus one chunk, no mapped pages (with int64 copies it was ~88 bytes).
    cols = f.read_item_fields(0, c, ("key_hash", "phy_offset", "time_diff_s", "prev_index"))
    kh, phy, td, prev = cols["key_hash"], cols["phy_offset"], cols["time_diff_s"], cols["prev_index"]
    del cols
    idx = np.arange(c, dtype=np.int32)

    bad = np.flatnonzero((slots < 0) | (slots >= c))
    report.add(name, L.slots_offset() + 4 * bad, "slot-range",
               [f"slot {s} holds {slots[s]}, outside [0, {c})" for s in bad[:MAX_LISTED_PER_KIND].tolist()])
    used = int(np.count_nonzero(slots))
    if used != h.hash_slot_count:
        report.add(name, hdr["hash_slot_count"][1], "header",
                   f"hashSlotCount {h.hash_slot_count} but {used} slots are non-empty")
    if kh[0] or phy[0] or td[0] or prev[0]:  # the four fields are the item's 20 bytes
        report.add(name, items_at, "item0", "item 0 is not zero (RocketMQ never writes it)")
    nz = storage.first_nonzero(f.path, items_at + c * item_size, L.index_file_size(S, N))
    if nz is not None:
        report.add(name, nz, "tail", f"non-zero byte past indexCount {c}")
    if c == 1:
        return {"kh": kh[1:], "phy": phy[1:], "td": td[1:]}

    i1 = idx[1:]
    off = lambda i, fld: items_at + item_size * np.asarray(i, np.int64) + L.INDEX_ITEM.fields[fld][1]  # noqa: E731
    bad = i1[(prev[1:] < 0) | (prev[1:] >= i1)]
    report.add(name, off(bad, "prev_index"), "chain-order",
               [f"item {i} links to {prev[i]}: chains must go strictly backwards" for i in bad[:MAX_LISTED_PER_KIND].tolist()])
    bad = i1[kh[1:] < 0]
    report.add(name, off(bad, "key_hash"), "key-hash", "negative keyHash (abs() of a Java hash is never negative)")
    bad = i1[td[1:] < 0]
    report.add(name, off(bad, "time_diff_s"), "time-diff", "negative time diff (queries stop at it)")

    slot = slot_of(kh, S)
    ok_prev = (prev > 0) & (prev < idx)
    ok_prev[0] = False
    bad = idx[ok_prev][slot[prev[ok_prev]] != slot[ok_prev]]
    report.add(name, off(bad, "prev_index"), "chain-slot",
               [f"item {i} (slot {slot[i]}) links to item {prev[i]} of slot {slot[prev[i]]}"
                for i in bad[:MAX_LISTED_PER_KIND].tolist()])
    heads_slot = np.flatnonzero((slots > 0) & (slots < c))
    heads = slots[heads_slot]
    bad = heads_slot[slot[heads] != heads_slot]
    report.add(name, L.slots_offset() + 4 * bad, "slot-head",
               [f"slot {s} starts at item {slots[s]} whose keyHash maps to slot {slot[slots[s]]}"
                for s in bad[:MAX_LISTED_PER_KIND].tolist()])
    refs = np.bincount(np.concatenate([heads, prev[ok_prev]]), minlength=c)
    bad = i1[refs[1:] == 0]
    report.add(name, off(bad, "key_hash"), "unreachable", "item is in no slot's chain: queries never find it")
    bad = i1[refs[1:] > 1]
    report.add(name, off(bad, "key_hash"), "shared-item", "item is linked from more than one place")

    if h.begin_phy_offset != phy[1]:
        report.add(name, hdr["begin_phy_offset"][1], "header",
                   f"beginPhyOffset {h.begin_phy_offset} != first item's {phy[1]}")
    if h.end_phy_offset != phy[c - 1]:
        report.add(name, hdr["end_phy_offset"][1], "header",
                   f"endPhyOffset {h.end_phy_offset} != last item's {phy[c - 1]}")
    bad = i1[1:][np.diff(phy[1:]) < 0]
    report.add(name, off(bad, "phy_offset"), "order", "phyOffset below the previous item's: not in CommitLog order")
    if h.begin_timestamp > 0:
        expect_last = int(time_diffs(np.array([h.end_timestamp]), h.begin_timestamp)[0])
        if c > 2 and expect_last != td[c - 1]:
            report.add(name, off(c - 1, "time_diff_s"), "header",
                       f"last item's time diff {td[c - 1]} != (endTimestamp - beginTimestamp)/1000 = {expect_last}")
    return {"kh": kh[1:], "phy": phy[1:], "td": td[1:]}


class _Sink:
    """Problems of the content pass, kept per (file, kind) as the chunks find them: the first
    ``MAX_LISTED_PER_KIND`` with their details, the offset of the next one, and the full count. Flushed
    into the report at the end in the order of a one-shot check (:func:`listing_order`)."""

    ORDER = PER_FILE_KINDS + CROSS_FILE_KINDS

    def __init__(self):
        self.kept: dict[tuple[int, str], list] = {}

    def add(self, fi: int, offsets, kind: str, details) -> None:
        offsets = np.atleast_1d(np.asarray(offsets, np.int64))
        if not len(offsets):
            return
        entry = self.kept.setdefault((fi, kind), [[], 0, None])  # listed, total, first unlisted offset
        listed = entry[0]
        take = min(max(0, MAX_LISTED_PER_KIND - len(listed)), len(offsets))
        if take:
            texts = details(slice(0, take)) if callable(details) else [details] * take
            listed.extend(zip(offsets[:take].tolist(), texts))
        if entry[2] is None and len(offsets) > take:
            entry[2] = int(offsets[take])
        entry[1] += len(offsets)

    def add_found(self, found: Found, window_ids) -> None:
        """Every row of ``found``, a ``missing`` row once per entry it stands for, per file in row order."""
        rows = np.repeat(np.arange(len(found.offset)), found.n)
        for fi in unique_sorted(found.file[rows]).tolist():
            sel = rows[found.file[rows] == fi]
            wid = window_ids[fi] if window_ids is not None else None
            self.add(fi, found.offset[sel], found.kind,
                     lambda s, sel=sel, wid=wid: [describe(found.kind, a, b, wid) for a, b in
                                                  zip(found.a[sel][s].tolist(), found.b[sel][s].tolist())])

    def flush(self, report: VerifyReport, files: list[IndexFile]) -> None:
        order = listing_order(len(files))
        for fi, kind in order:
            entry = self.kept.get((fi, kind))
            if entry is None:
                continue
            listed, total, next_offset = entry
            report.counts[kind] += total
            report.files[fi].problems += total  # the per-file table counts content problems too
            report.problems.extend(Problem(files[fi].path, off, kind, d) for off, d in listed)
            if total > len(listed):
                report.problems.append(Problem(files[fi].path, next_offset, kind,
                                               f"... and {total - len(listed)} more"))


class _Items:
    """One file's items for the content pass, walked in offset order a chunk at a time.

    Holds the offsets as int64 (8 B an item); key hashes and time diffs are read per chunk by the one
    item reader. A file whose offsets are out of order (an ``order`` problem) is walked through a
    sorting permutation, so every item is still judged exactly once; such a (damaged) file's hashes and
    diffs are held too (8 B an item more), as a permuted chunk is no range of the file.
    """

    _FIELDS = ("key_hash", "time_diff_s")

    def __init__(self, fi: int, f: IndexFile, count: int, lo: int = 0):
        self.fi, self.f = fi, f
        self.phy = f.read_item_fields(1, count + 1, ("phy_offset",))["phy_offset"]
        self.perm = self.held = None
        if len(self.phy) > 1 and (np.diff(self.phy) < 0).any():
            self.perm = np.argsort(self.phy, kind="stable")
            self.phy = self.phy[self.perm]
            self.held = f.read_item_fields(1, count + 1, self._FIELDS)
        # Items below ``lo`` (the log's first offset: retention removed their messages) are not judged.
        self.cursor = int(np.searchsorted(self.phy, lo)) if lo else 0

    @property
    def done(self) -> bool:
        return self.cursor >= len(self.phy)

    def take(self, upto: int):
        """Items with offset <= ``upto`` not taken yet: (item index from 0 = item 1, phy, keyHash, timeDiff)."""
        start, stop = self.cursor, int(np.searchsorted(self.phy, upto, side="right"))
        pos = np.arange(start, stop)
        self.cursor = max(start, stop)
        if self.perm is None:
            idx = pos
            cols = self.f.read_item_fields(1 + start, 1 + max(start, stop), self._FIELDS)
        else:
            idx = self.perm[pos]
            cols = {k: v[idx] for k, v in self.held.items()}
        return idx, self.phy[pos], cols["key_hash"].astype(np.int64), cols["time_diff_s"].astype(np.int64)


def verify_index(files: list[IndexFile], commitlog=None, *, window_ms: int | None = None,
                 window_ids: list[int] | None = None, check_crc: bool = True, open_end: bool = False,
                 open_start: bool = False, rules: BuildRead | None = None, gaps: bool = True) -> VerifyReport:
    """Check ``files`` (oldest first); with ``commitlog``, check their content and coverage too.

    ``gaps``: also read the log outside the files' offsets, and report the entries it implies there
    (``uncovered``, :mod:`rocketidx.verify.coverage`: a build's whole range must be indexed); off where the
    caller judges those stretches itself (``verify --store``, with what a restart restores).

    ``open_end``: the last indexed message may continue in a file that is not among ``files`` (a broker
    rolled over in the middle of its keys), so its missing entries are not problems; ``open_start``:
    likewise for the first message, whose first entries may sit in an older file not among ``files``.
    ``rules``: how the build that wrote the files read the CommitLog (:meth:`BuildRead.of` a manifest:
    its offset and time filters; a bare directory has none), so the entries expected are the build's.

    Memory: one file's items during its structure check; then one pass over the CommitLog range in
    chunks, holding the offsets of the files whose range the pass is in (8 B an item) and one chunk.
    A log whose PHYSICALOFFSET fields are not the records' positions (damage the build accepts, as the
    broker's recovery does) cannot be judged a stretch of offsets at a time, since a message's field
    can point anywhere: it is judged in one held pass (:func:`_judge_held`, 24 B per entry).
    """
    rules = rules or BuildRead()
    report = VerifyReport()
    spans: dict[int, tuple[int, int, int]] = {}  # file -> (items, lowest offset, highest offset)
    for fi, f in enumerate(files):
        h = f.header
        summary = FileSummary(f.name, max(0, h.index_count - 1), h.begin_timestamp, h.end_timestamp,
                              h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count)
        before = sum(report.counts.values())
        arrays = check_structure(f, report)
        summary.problems = sum(report.counts.values()) - before
        report.files.append(summary)
        if arrays is not None:
            report.entries_checked += len(arrays["phy"])
            if len(arrays["phy"]):
                spans[fi] = (len(arrays["phy"]), int(arrays["phy"].min()), int(arrays["phy"].max()))
        del arrays  # the content pass reads the items again, a chunk at a time
    if commitlog is None:
        return report
    if not spans:
        if gaps:
            add_gap_problems(report, log_gaps(commitlog, None, rules, check_crc=check_crc))
        return report
    spans = unexpired_spans(files, spans, commitlog, report)
    if not spans:
        return report
    lo = min(b for _, b, _ in spans.values())
    hi = max(e for _, _, e in spans.values())
    report.covered_range = (lo, hi)
    report.log_mismatch = log_mismatch(files, commitlog, check_crc, rules)
    report.expected_entries = 0
    params = ContentParams(
        tuple(L.items_offset(f.hash_slot_num) for f in files), tuple(f.header.begin_timestamp for f in files),
        tuple(spans[fi][1] if fi in spans else -1 for fi in range(len(files))),  # missing entries' owners
        window_ms, tuple(window_ids) if window_ids is not None else None, lo, hi, open_start, open_end,
        tuple(f.header.end_timestamp for f in files), tuple(f.header.index_count - 1 for f in files))
    if not rules.fields_out_of_place:
        try:
            sink = _judge_streaming(files, spans, commitlog, params, rules, check_crc, report)
            # A misplaced field the streaming read never met (it starts at the lowest item, which such a
            # field can put past every real record) shows as problems: look for one before reporting them
            # (not when they come from another log: the sample found its fields where they lie).
            if sink.kept and report.log_mismatch is None and _misplaced_field_in(commitlog, rules, check_crc):
                sink = None
        except _FieldsOutOfPlace:
            sink = None
    held = None
    if rules.fields_out_of_place or sink is None:
        report.log_mismatch = None  # offsets are not positions here: the sample cannot judge (as on Spark)
        report.expected_entries = 0
        held = GapTally(None)  # the held pass applies the broker's rules to the whole log: it finds the gaps too
        sink = _judge_held(files, spans, commitlog, params, rules, check_crc, report, held)
    sink.flush(report, files)
    if gaps:
        add_gap_problems(report, held.gaps() if held is not None else
                         log_gaps(commitlog, (lo, hi), rules, check_crc=check_crc))
    return report


def unexpired_spans(files: list[IndexFile], spans: dict[int, tuple[int, int, int]], commitlog, report: VerifyReport
               ) -> dict[int, tuple[int, int, int]]:
    """The spans the content pass judges: items at or past the log's first offset. Items below it point at
    messages the broker's retention removed (a broker's index keeps a file until its every entry is below;
    an incremental build's one-sequence output too): they are counted in ``expired_items``, not judged."""
    from rocketidx.commitlog.segments import list_segments
    segs = list_segments(commitlog)
    first = segs[0].base_offset if segs else 0
    if not spans or min(b for _, b, _ in spans.values()) >= first:
        return spans
    kept = {}
    for fi, (n, lo, hi) in spans.items():
        below = n if hi < first else int(np.count_nonzero(
            files[fi].read_item_fields(1, n + 1, ("phy_offset",))["phy_offset"] < first))
        report.expired_items += below
        if below < n:
            kept[fi] = (n, max(lo, first), hi)
    return kept


@dataclass(frozen=True)
class BuildRead:
    """How a build read the CommitLog, as its manifest records it: where it started (``start_offset``:
    its ``--from-offset``, else its first segment), its offset and time filters, and whether some
    record's PHYSICALOFFSET field was not its position. A bare directory has none of these."""

    start_offset: int | None = None
    to_offset: int | None = None
    from_time_ms: int | None = None
    to_time_ms: int | None = None
    fields_out_of_place: bool = False
    commitlog: str | None = None  # the CommitLog the build read, as it was given to it

    @classmethod
    def of(cls, manifest: Manifest | None) -> BuildRead:
        if manifest is None:
            return cls()
        h = manifest.header
        f = h.get("filters") or {}
        segments = h.get("segments") or []
        start = f.get("from_offset")
        if start is None and segments:
            start = segments[0]["base_offset"]
        return cls(start, f.get("to_offset"), f.get("from_time_ms"), f.get("to_time_ms"),
                   h.get("phy_mismatch") is not None, h.get("commitlog"))

    def in_time(self, ts: np.ndarray) -> np.ndarray:
        keep = np.ones(len(ts), bool)
        if self.from_time_ms is not None:
            keep &= ts >= self.from_time_ms
        if self.to_time_ms is not None:
            keep &= ts < self.to_time_ms
        return keep


def log_mismatch(files: list[IndexFile], commitlog, check_crc: bool, rules: BuildRead) -> str | None:
    """The report's line when ``files`` were not built from ``commitlog`` (a sample of their entries,
    :func:`rocketidx.query.logmatch.match_log`: most point where no message makes their key), else None."""
    from rocketidx.query.logmatch import match_log
    m = match_log(files, commitlog, check_crc=check_crc, built_from=rules.commitlog,
                  fields_out_of_place=rules.fields_out_of_place)
    if not m.another_log:
        return None
    return f"the index was not built from this CommitLog ({storage.redact(str(commitlog))}): {m.reason()}"


class _FieldsOutOfPlace(Exception):
    """A record whose PHYSICALOFFSET is not its position: the streaming judge cannot go on."""


def _entry_columns(e) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (e.column("phy_offset").to_numpy(), e.column("key_hash").to_numpy().astype(np.int64),
            e.column("store_timestamp_ms").to_numpy())


def _judge_streaming(files, spans, commitlog, params: ContentParams, rules: BuildRead, check_crc: bool,
                     report: VerifyReport) -> _Sink:
    """The content pass over ``[lo, hi]`` a chunk at a time: the items up to the highest message read so
    far against the chunk's entries. Exact while every record's PHYSICALOFFSET is its position (then a
    message's entries and the items pointing at it meet in one stretch, and no entry is ever below the
    window's endPhyOffset); raises :class:`_FieldsOutOfPlace` at the first record where that fails."""
    from rocketidx.commitlog.segments import list_segments
    from rocketidx.commitlog.readers import CommitLogReader, first_misplaced
    lo, hi = params.lo, params.hi
    pending = sorted(spans, key=lambda fi: spans[fi][1])
    active: list[_Items] = []
    sink = _Sink()
    segs = list_segments(commitlog, from_offset=lo, to_offset=hi + 1)
    reader = CommitLogReader(segs, check_crc=check_crc, start_offset=lo)
    bound = lo - 1

    def judge(upto: int, m_phy, e_phy, e_kh, e_ts) -> None:
        while pending and spans[pending[0]][1] <= upto:
            fi = pending.pop(0)
            active.append(_Items(fi, files[fi], spans[fi][0], lo))
        _judge_items([it.take(upto) + (it.fi,) for it in active], m_phy, e_phy, e_kh, e_ts, params, sink)
        active[:] = [it for it in active if not it.done]

    for seg, buf, recs, e in reader.entry_chunks():
        if not len(recs):
            continue
        if first_misplaced(seg, recs):
            raise _FieldsOutOfPlace()
        m_phy = unique_sorted(recs[:, L.REC_PHY].astype(np.int64))
        phy, kh, ts = _entry_columns(e)
        keep = (phy >= lo) & (phy <= hi) & rules.in_time(ts)
        if rules.to_offset is not None:
            keep &= phy < rules.to_offset
        report.expected_entries += int(np.count_nonzero(keep))
        bound = max(bound, int(m_phy[-1]))
        judge(min(bound, hi), m_phy, phy[keep], kh[keep], ts[keep])
        if bound >= hi:
            break
    empty = np.zeros(0, np.int64)
    judge(hi, empty, empty, empty, empty)  # items past where reading stopped start no message
    return sink


def _misplaced_field_in(commitlog, rules: BuildRead, check_crc: bool) -> bool:
    """Whether a record the build read (from its start) has a PHYSICALOFFSET field that is not its
    position; records only, stopping at the first."""
    from rocketidx.commitlog.segments import list_segments
    from rocketidx.commitlog.readers import CommitLogReader, first_misplaced
    segs = list_segments(commitlog, from_offset=rules.start_offset, to_offset=rules.to_offset)
    reader = CommitLogReader(segs, check_crc=check_crc, start_offset=rules.start_offset, end_offset=rules.to_offset)
    return any(first_misplaced(seg, recs) for seg, _, recs in reader.record_chunks())


def _judge_held(files, spans, commitlog, params: ContentParams, rules: BuildRead, check_crc: bool,
                report: VerifyReport, outside: GapTally | None = None) -> _Sink:
    """The content pass for a log whose PHYSICALOFFSET fields are not all positions: read as the build
    read (from its start, within its filters, to where reading stops; a bare directory's from the log's
    first segment), apply ``buildIndex``'s rules in
    order (window, then the skip below each window's endPhyOffset: :func:`at_or_above_end`), hold the
    entries of ``[lo, hi]`` and judge every item against them at once."""
    from rocketidx.index.writer import at_or_above_end
    from rocketidx.commitlog.segments import list_segments
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.index.windows import assign_windows
    lo, hi = params.lo, params.hi
    start = rules.start_offset  # a bare directory: the log's first record (a field may point anywhere)
    segs = list_segments(commitlog, from_offset=start, to_offset=rules.to_offset)
    reader = CommitLogReader(segs, check_crc=check_crc, start_offset=start, end_offset=rules.to_offset)
    ends: dict[int, int] = {}  # window -> endPhyOffset of its current file
    messages, held = [], []
    for seg, buf, recs, e in reader.entry_chunks():
        messages.append(unique_sorted(recs[:, L.REC_PHY].astype(np.int64)))
        phy, kh, ts = _entry_columns(e)
        keep = rules.in_time(ts)
        phy, kh, ts = phy[keep], kh[keep], ts[keep]
        window = assign_windows(ts, params.window_ms or 0)
        put = np.zeros(len(phy), bool)
        order = np.argsort(window, kind="stable")  # each window's entries, in CommitLog order
        for at in np.split(order, np.flatnonzero(np.diff(window[order])) + 1) if len(order) else []:
            w = int(window[at[0]])
            ok = at_or_above_end(phy[at], ends.get(w, 0))
            put[at[ok]] = True
            if ok.any():
                ends[w] = int(phy[at[ok]][-1])
        if outside is not None:  # entries the rules put outside the files' offsets: the gaps
            outside.add("head", seg, phy[put & (phy < lo)])
            outside.add("tail", seg, phy[put & (phy > hi)])
        put &= (phy >= lo) & (phy <= hi)
        report.expected_entries += int(np.count_nonzero(put))
        held.append((phy[put], kh[put], ts[put]))
    cat = lambda k: np.concatenate([h[k] for h in held]) if held else np.zeros(0, np.int64)  # noqa: E731
    m_phy = unique_sorted(np.concatenate(messages)) if messages else np.zeros(0, np.int64)
    sink = _Sink()
    items = [_Items(fi, files[fi], spans[fi][0], lo) for fi in sorted(spans, key=lambda fi: spans[fi][1])]
    _judge_items([it.take(hi) + (it.fi,) for it in items], m_phy, cat(0), cat(1), cat(2), params, sink)
    return sink


def _judge_items(taken, m_phy, e_phy, e_kh, e_ts, params: ContentParams, sink: _Sink) -> None:
    """:func:`judge_content` of the items ``taken`` (``_Items.take`` results plus the file number)
    against a stretch's entries, into ``sink``."""
    cat = lambda cols: np.concatenate(cols) if cols else np.zeros(0, np.int64)  # noqa: E731
    items = ItemRows(cat([np.full(len(t[1]), t[4], np.int64) for t in taken]),
                     cat([1 + t[0].astype(np.int64) for t in taken]),
                     *(cat([t[k] for t in taken]) for k in (1, 2, 3)))
    for found in judge_content(items, EntryRows(e_phy, e_kh, e_ts), params, m_phy):
        sink.add_found(found, params.window_ids)


def open_for_verify(index_dir, hash_slot_num: int | None, index_num: int | None, report: VerifyReport
                    ) -> tuple[list[IndexFile], Manifest | None]:
    """Open every file of :func:`rocketidx.output.open.open_index_dir`; a file that cannot even be opened
    (wrong size) becomes a problem in ``report``, not an abort. Returns the files that opened and the
    directory's manifest (None for a bare directory)."""
    d = open_index_dir(index_dir, hash_slot_num, index_num)
    if not d.paths and d.manifest is None:
        raise StoreLayoutError(storage.redact(str(index_dir)), "no IndexFiles found (nothing to verify)")
    files = []
    for path in d.paths:
        try:
            files.append(IndexFile(path, d.hash_slot_num, d.index_num, check=False))
        except CorruptIndexError as e:
            report.add(e.path, e.offset, "size", e.reason)
        except FileNotFoundError:  # damage to the output, not a reason the check cannot run
            report.add(path, 0, "missing-file", "the manifest lists this file but it is not there")
    return files, d.manifest
