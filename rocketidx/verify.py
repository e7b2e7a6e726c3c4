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
a windowed build output each file holds only its window's entries.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from rocketidx import layout as L
from rocketidx.arrays import member_of, unique_counts, unique_sorted
from rocketidx.errors import CorruptIndexError
from rocketidx.indexfile import IndexFile, open_index_dir, time_diffs
from rocketidx.keys import slot_of

MAX_LISTED_PER_KIND = 20  # per file and kind; the counts are always complete


@dataclass
class Problem:
    file: str
    offset: int
    kind: str
    detail: str


@dataclass
class FileSummary:
    name: str
    entries: int
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    problems: int = 0


@dataclass
class VerifyReport:
    files: list[FileSummary] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    entries_checked: int = 0
    expected_entries: int | None = None
    covered_range: tuple[int, int] | None = None

    @property
    def clean(self) -> bool:
        return not self.counts

    def add(self, file: str, offsets, kind: str, detail) -> None:
        """Record problems of one kind at the given byte offsets (detail: str or one str per offset)."""
        offsets = np.atleast_1d(np.asarray(offsets, np.int64))
        if len(offsets) == 0:
            return
        self.counts[kind] += len(offsets)
        for i, off in enumerate(offsets[:MAX_LISTED_PER_KIND].tolist()):
            d = detail[i] if isinstance(detail, (list, tuple)) else detail
            self.problems.append(Problem(file, int(off), kind, d))
        if len(offsets) > MAX_LISTED_PER_KIND:
            self.problems.append(Problem(file, int(offsets[MAX_LISTED_PER_KIND]), kind,
                                         f"... and {len(offsets) - MAX_LISTED_PER_KIND} more"))

    def as_dict(self) -> dict:
        return {"clean": self.clean, "counts": dict(self.counts), "entries_checked": self.entries_checked,
                "expected_entries": self.expected_entries, "covered_range": self.covered_range,
                "files": [asdict(f) for f in self.files], "problems": [asdict(p) for p in self.problems]}


def _zero_from_file(path: str, offset: int, end: int) -> int | None:
    """The first non-zero byte offset in ``[offset, end)`` of a file, or None (holes are skipped)."""
    with open(path, "rb") as fh:
        fd = fh.fileno()
        pos = offset
        chunk = 8 << 20
        while pos < end:
            try:
                pos = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                return None
            if pos >= end:
                return None
            n = min(chunk, end - pos)
            data = np.frombuffer(os.pread(fd, n, pos), np.uint8)
            nz = np.flatnonzero(data)
            if len(nz):
                return pos + int(nz[0])
            pos += n
    return None


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
    nz = _zero_from_file(f.path, items_at + c * item_size, L.index_file_size(S, N))
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
    into the report at the end in the order of a one-shot check (per file: not-a-message, time-diff,
    window; then every file's extras; then every file's missing entries)."""

    ORDER = ("not-a-message", "time-diff", "window", "extra", "missing")

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

    def flush(self, report: VerifyReport, files: list[IndexFile]) -> None:
        order = [(fi, k) for k in self.ORDER[:3] for fi in range(len(files))]
        order = sorted(order, key=lambda x: (x[0], self.ORDER.index(x[1])))
        order += [(fi, k) for k in self.ORDER[3:] for fi in range(len(files))]
        for fi, kind in order:
            entry = self.kept.get((fi, kind))
            if entry is None:
                continue
            listed, total, next_offset = entry
            report.counts[kind] += total
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

    def __init__(self, fi: int, f: IndexFile, count: int):
        self.fi, self.f = fi, f
        self.phy = f.read_item_fields(1, count + 1, ("phy_offset",))["phy_offset"]
        self.perm = self.held = None
        if len(self.phy) > 1 and (np.diff(self.phy) < 0).any():
            self.perm = np.argsort(self.phy, kind="stable")
            self.phy = self.phy[self.perm]
            self.held = f.read_item_fields(1, count + 1, self._FIELDS)
        self.cursor = 0

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
                 open_start: bool = False) -> VerifyReport:
    """Check ``files`` (oldest first); with ``commitlog``, check their content and coverage too.

    ``open_end``: the last indexed message may continue in a file that is not among ``files`` (a broker
    rolled over in the middle of its keys), so its missing entries are not problems; ``open_start``:
    likewise for the first message, whose first entries may sit in an older file not among ``files``.

    Memory: one file's items during its structure check; then one pass over the CommitLog range in
    chunks, holding the offsets of the files whose range the pass is in (8 B an item) and one chunk.
    """
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
    if commitlog is None or not spans:
        return report
    lo = min(b for _, b, _ in spans.values())
    hi = max(e for _, _, e in spans.values())
    report.covered_range = (lo, hi)
    report.expected_entries = 0
    # Each missing entry goes to the file whose offset range holds it, else the nearest before.
    begins = np.array([spans[fi][1] if fi in spans else -1 for fi in range(len(files))])
    pending = sorted(spans, key=lambda fi: spans[fi][1])
    active: list[_Items] = []
    sink = _Sink()

    def judge(upto: int, m_phy, e_phy, e_kh, e_ts) -> None:
        while pending and spans[pending[0]][1] <= upto:
            fi = pending.pop(0)
            active.append(_Items(fi, files[fi], spans[fi][0]))
        taken = [(it.fi, *it.take(upto)) for it in active]
        active[:] = [it for it in active if not it.done]
        _judge_chunk(taken, files, m_phy, e_phy, e_kh, e_ts, begins, lo, hi, open_start, open_end,
                     window_ms, window_ids, sink)

    from rocketidx.messages import REC_PHY, CommitLogReader
    from rocketidx.segments import list_segments
    segs = list_segments(commitlog, from_offset=lo, to_offset=hi + 1)
    reader = CommitLogReader(segs, check_crc=check_crc, start_offset=lo)
    bound = lo - 1
    for seg, buf, recs, e in reader.entry_chunks():
        if not len(recs):
            continue
        m_phy = unique_sorted(recs[:, REC_PHY].astype(np.int64))
        phy = e.column("phy_offset").to_numpy()
        keep = (phy >= lo) & (phy <= hi)
        report.expected_entries += int(np.count_nonzero(keep))
        bound = max(bound, int(m_phy[-1]))
        judge(min(bound, hi), m_phy, phy[keep], e.column("key_hash").to_numpy()[keep].astype(np.int64),
              e.column("store_timestamp_ms").to_numpy()[keep])
        if bound >= hi:
            break
    empty = np.zeros(0, np.int64)
    judge(hi, empty, empty, empty, empty)  # items past where reading stopped start no message
    sink.flush(report, files)
    return report


def _judge_chunk(taken, files, m_phy, e_phy, e_kh, e_ts, begins, lo, hi, open_start, open_end,
                 window_ms, window_ids, sink: _Sink) -> None:
    """Content and coverage of the items and expected entries of one stretch of CommitLog offsets.

    ``taken``: per active file (file index, item indices, offsets, keyHashes, time diffs) of its items
    in the stretch; ``m_phy``: the stretch's message offsets (ascending); ``e_*``: its expected entries,
    in CommitLog order. Every message lies wholly in one stretch, so the multiset of its entries is
    compared whole.
    """
    item = L.INDEX_ITEM
    # Per-message store time, from the message's first entry (as the index computes time diffs).
    first = np.flatnonzero(np.concatenate(([True], e_phy[1:] != e_phy[:-1]))) if len(e_phy) else empty_i64()
    u_phy, u_ts = e_phy[first], e_ts[first]
    if len(u_phy) > 1 and (np.diff(u_phy) <= 0).any():  # PHYSICALOFFSET fields out of order: sort
        o = np.argsort(u_phy, kind="stable")
        u_phy, u_ts = u_phy[o], u_ts[o]
        keep = np.concatenate(([True], u_phy[1:] != u_phy[:-1]))
        u_phy, u_ts = u_phy[keep], u_ts[keep]
    parts = []
    for fi, idx, phy, kh, td in taken:
        if not len(idx):
            continue
        f = files[fi]
        off = L.items_offset(f.hash_slot_num) + item.itemsize * (1 + idx)
        is_msg = member_of(phy, m_phy)
        sink.add(fi, off[~is_msg], "not-a-message",
                 lambda s, p=phy[~is_msg]: [f"phyOffset {v} is not the start of a valid message" for v in p[s].tolist()])
        pos = np.minimum(np.searchsorted(u_phy, phy), max(len(u_phy) - 1, 0))
        has = (len(u_phy) > 0) & (u_phy[pos] == phy) if len(u_phy) else np.zeros(len(phy), bool)
        ts = np.where(has, u_ts[pos] if len(u_ts) else 0, 0)
        exp_td = time_diffs(ts, f.header.begin_timestamp)
        check = has & (idx != 0)  # a rolled file's first diff is measured from the previous file's end
        bad = np.flatnonzero(check & (exp_td != td))
        sink.add(fi, off[bad] + item.fields["time_diff_s"][1], "time-diff",
                 lambda s, b=bad: [f"time diff {td[i]} but the message's store time gives {exp_td[i]}"
                                   for i in b[s].tolist()])
        if window_ms and window_ids is not None:
            bad = np.flatnonzero(has & (np.floor_divide(ts, window_ms) != window_ids[fi]))
            sink.add(fi, off[bad], "window", f"entry's store time is outside the file's window {window_ids[fi]}")
        parts.append((phy, kh, np.full(len(phy), fi), off))
    # Coverage: items and expected entries as multisets of (message, keyHash). Offsets are ranked among
    # the stretch's messages first, so (rank, keyHash) packs into one int64 whatever the offsets' size.
    cat = lambda i, dt: np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, dt)  # noqa: E731
    i_phy, i_kh, i_file, i_off = cat(0, np.int64), cat(1, np.int64), cat(2, np.int64), cat(3, np.int64)
    i_msg = member_of(i_phy, m_phy)
    item_keys = (np.searchsorted(m_phy, i_phy).astype(np.int64) << 31) | i_kh
    got = unique_counts(item_keys[i_msg])
    want = unique_counts((np.searchsorted(m_phy, e_phy).astype(np.int64) << 31) | e_kh)
    keys = unique_sorted(np.concatenate((got[0], want[0])))
    g = _lookup(got, keys)
    w_ = _lookup(want, keys)
    extra_keys = keys[g > w_]
    missing = w_ > g
    if len(keys):
        at = m_phy[keys >> 31]
        if open_end:
            missing &= at != hi
        if open_start:
            missing &= at != lo
    if len(extra_keys):
        sel = np.flatnonzero(member_of(item_keys, extra_keys) & i_msg)
        for fi in unique_sorted(i_file[sel]).tolist():
            s = sel[i_file[sel] == fi]
            sink.add(fi, i_off[s], "extra", lambda r, s=s: [f"no index key of the message at {p} hashes to {k}"
                                                            for p, k in zip(i_phy[s][r].tolist(), i_kh[s][r].tolist())])
    if missing.any():
        m_keys = keys[missing]
        n_missing = (w_ - g)[missing]
        at_phy = m_phy[m_keys >> 31]
        m_kh = m_keys & 0x7FFFFFFF
        owner = np.clip(np.searchsorted(begins, at_phy, side="right") - 1, 0, len(files) - 1)
        for fi in unique_sorted(owner).tolist():
            s = np.flatnonzero(owner == fi)
            rep_phy, rep_kh = np.repeat(at_phy[s], n_missing[s]), np.repeat(m_kh[s], n_missing[s])
            sink.add(fi, np.zeros(len(rep_phy), np.int64), "missing",
                     lambda r, a=rep_phy, b=rep_kh: [f"entry (phyOffset {p}, keyHash {k}) the CommitLog implies "
                                                     "is not indexed" for p, k in zip(a[r].tolist(), b[r].tolist())])


def empty_i64() -> np.ndarray:
    return np.zeros(0, np.int64)


def _lookup(counted: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    k, c = counted
    pos = np.searchsorted(k, keys)
    pos = np.minimum(pos, max(len(k) - 1, 0))
    return np.where((len(k) > 0) & (k[pos] == keys), c[pos] if len(k) else 0, 0)


def open_for_verify(index_dir, hash_slot_num: int | None, index_num: int | None, report: VerifyReport
                    ) -> tuple[list[IndexFile], dict | None]:
    """Open every file of :func:`rocketidx.indexfile.open_index_dir`; a file that cannot even be opened
    (wrong size) becomes a problem in ``report``, not an abort. Returns the files that opened and the
    manifest as plain JSON values (the CLI reads its window; ``open_index_dir(...).manifest`` is the
    typed one)."""
    d = open_index_dir(index_dir, hash_slot_num, index_num)
    files = []
    for path in d.paths:
        try:
            files.append(IndexFile(path, d.hash_slot_num, d.index_num, check=False))
        except CorruptIndexError as e:
            report.add(e.path, e.offset, "size", e.reason)
    return files, (d.manifest.to_dict() if d.manifest is not None else None)
