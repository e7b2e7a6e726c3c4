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
from rocketidx.indexfile import IndexFile, time_diffs

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
    items = np.asarray(f.items[:c])
    kh = items["key_hash"].astype(np.int64)
    phy = items["phy_offset"].astype(np.int64)
    td = items["time_diff_s"].astype(np.int64)
    prev = items["prev_index"].astype(np.int64)
    idx = np.arange(c)

    bad = np.flatnonzero((slots < 0) | (slots >= c))
    report.add(name, L.slots_offset() + 4 * bad, "slot-range",
               [f"slot {s} holds {slots[s]}, outside [0, {c})" for s in bad[:MAX_LISTED_PER_KIND].tolist()])
    used = int(np.count_nonzero(slots))
    if used != h.hash_slot_count:
        report.add(name, hdr["hash_slot_count"][1], "header",
                   f"hashSlotCount {h.hash_slot_count} but {used} slots are non-empty")
    if items[:1].tobytes() != bytes(item_size):
        report.add(name, items_at, "item0", "item 0 is not zero (RocketMQ never writes it)")
    nz = _zero_from_file(f.path, items_at + c * item_size, L.index_file_size(S, N))
    if nz is not None:
        report.add(name, nz, "tail", f"non-zero byte past indexCount {c}")
    if c == 1:
        return {"kh": kh[1:], "phy": phy[1:], "td": td[1:]}

    i1 = idx[1:]
    off = lambda i, fld: items_at + item_size * np.asarray(i) + L.INDEX_ITEM.fields[fld][1]  # noqa: E731
    bad = i1[(prev[1:] < 0) | (prev[1:] >= i1)]
    report.add(name, off(bad, "prev_index"), "chain-order",
               [f"item {i} links to {prev[i]}: chains must go strictly backwards" for i in bad[:MAX_LISTED_PER_KIND].tolist()])
    bad = i1[kh[1:] < 0]
    report.add(name, off(bad, "key_hash"), "key-hash", "negative keyHash (abs() of a Java hash is never negative)")
    bad = i1[td[1:] < 0]
    report.add(name, off(bad, "time_diff_s"), "time-diff", "negative time diff (queries stop at it)")

    slot_of = np.where(kh >= 0, kh % S, -1)
    ok_prev = (prev > 0) & (prev < idx)
    ok_prev[0] = False
    bad = idx[ok_prev][slot_of[prev[ok_prev]] != slot_of[ok_prev]]
    report.add(name, off(bad, "prev_index"), "chain-slot",
               [f"item {i} (slot {slot_of[i]}) links to item {prev[i]} of slot {slot_of[prev[i]]}"
                for i in bad[:MAX_LISTED_PER_KIND].tolist()])
    heads_slot = np.flatnonzero((slots > 0) & (slots < c))
    heads = slots[heads_slot]
    bad = heads_slot[slot_of[heads] != heads_slot]
    report.add(name, L.slots_offset() + 4 * bad, "slot-head",
               [f"slot {s} starts at item {slots[s]} whose keyHash maps to slot {slot_of[slots[s]]}"
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


def _expected_entries(commitlog, lo: int, hi: int, check_crc: bool = True):
    """(phy, key_hash, store_ts) of the entries the CommitLog implies for messages in ``[lo, hi]``."""
    from rocketidx.messages import REC_PHY, CommitLogReader
    from rocketidx.segments import list_segments
    segs = list_segments(commitlog, from_offset=lo, to_offset=hi + 1)
    reader = CommitLogReader(segs, check_crc=check_crc, start_offset=lo)
    phys, khs, tss, msg_phy = [], [], [], []
    for seg, buf, recs, e in reader.entry_chunks():
        msg_phy.append(recs[:, REC_PHY])
        phy = e.column("phy_offset").to_numpy()
        keep = (phy >= lo) & (phy <= hi)
        phys.append(phy[keep])
        khs.append(e.column("key_hash").to_numpy()[keep])
        tss.append(e.column("store_timestamp_ms").to_numpy()[keep])
        if len(recs) and recs[-1, REC_PHY] > hi:
            break
    cat = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt)  # noqa: E731
    return cat(phys, np.int64), cat(khs, np.int32).astype(np.int64), cat(tss, np.int64), cat(msg_phy, np.int64)


def verify_index(files: list[IndexFile], commitlog=None, *, window_ms: int | None = None,
                 window_ids: list[int] | None = None, check_crc: bool = True, open_end: bool = False,
                 open_start: bool = False) -> VerifyReport:
    """Check ``files`` (oldest first); with ``commitlog``, check their content and coverage too.

    ``open_end``: the last indexed message may continue in a file that is not among ``files`` (a broker
    rolled over in the middle of its keys), so its missing entries are not problems; ``open_start``:
    likewise for the first message, whose first entries may sit in an older file not among ``files``.
    """
    report = VerifyReport()
    per_file = []
    for f in files:
        h = f.header
        summary = FileSummary(f.name, max(0, h.index_count - 1), h.begin_timestamp, h.end_timestamp,
                              h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count)
        before = sum(report.counts.values())
        arrays = check_structure(f, report)
        summary.problems = sum(report.counts.values()) - before
        report.files.append(summary)
        per_file.append(arrays)
        if arrays is not None:
            report.entries_checked += len(arrays["phy"])
    if commitlog is None:
        return report
    nonempty = [(f, a) for f, a in zip(files, per_file) if a is not None and len(a["phy"])]
    if not nonempty:
        return report
    lo = min(int(a["phy"].min()) for _, a in nonempty)
    hi = max(int(a["phy"].max()) for _, a in nonempty)
    report.covered_range = (lo, hi)
    e_phy, e_kh, e_ts, msg_phy = _expected_entries(commitlog, lo, hi, check_crc)
    report.expected_entries = len(e_phy)
    msg_phy = unique_sorted(msg_phy)
    # Per-message store time, to check time diffs and windows (entries come in CommitLog order).
    order = np.argsort(e_phy, kind="stable")
    sorted_phy = e_phy[order]
    first = np.flatnonzero(np.concatenate(([True], sorted_phy[1:] != sorted_phy[:-1]))) if len(e_phy) else order
    u_phy = sorted_phy[first]
    u_ts = e_ts[order][first]

    all_keys = []
    for fi, (f, a) in enumerate(zip(files, per_file)):
        if a is None or not len(a["phy"]):
            continue
        items_at = L.items_offset(f.hash_slot_num)
        item_off = items_at + L.INDEX_ITEM.itemsize * (1 + np.arange(len(a["phy"])))
        is_msg = member_of(a["phy"], msg_phy)
        report.add(f.path, item_off[~is_msg], "not-a-message",
                   [f"phyOffset {p} is not the start of a valid message" for p in a["phy"][~is_msg][:MAX_LISTED_PER_KIND].tolist()])
        pos = np.searchsorted(u_phy, a["phy"])
        has = (pos < len(u_phy)) & (u_phy[np.minimum(pos, len(u_phy) - 1)] == a["phy"])
        ts = np.where(has, u_ts[np.minimum(pos, len(u_phy) - 1)], 0)
        begin = f.header.begin_timestamp
        exp_td = time_diffs(ts, begin)
        check = has.copy()
        check[0] = False  # a rolled file's first diff is measured from the previous file's end
        bad = np.flatnonzero(check & (exp_td != a["td"]))
        report.add(f.path, item_off[bad] + L.INDEX_ITEM.fields["time_diff_s"][1], "time-diff",
                   [f"time diff {a['td'][i]} but the message's store time gives {exp_td[i]}" for i in bad[:MAX_LISTED_PER_KIND].tolist()])
        if window_ms and window_ids is not None:
            w = np.floor_divide(ts, window_ms)
            bad = np.flatnonzero(has & (w != window_ids[fi]))
            report.add(f.path, item_off[bad], "window", f"entry's store time is outside the file's window {window_ids[fi]}")
        all_keys.append((a["phy"], a["kh"], np.full(len(a["phy"]), fi), item_off))
    # Coverage: items and expected entries as multisets of (message, keyHash). Offsets are ranked among
    # the messages first, so (rank, keyHash) packs into one int64 whatever the offsets' size.
    i_phy = np.concatenate([k[0] for k in all_keys])
    i_kh = np.concatenate([k[1] for k in all_keys])
    i_file = np.concatenate([k[2] for k in all_keys])
    i_off = np.concatenate([k[3] for k in all_keys])
    i_msg = member_of(i_phy, msg_phy)
    item_keys = (np.searchsorted(msg_phy, i_phy) << 31) | i_kh
    got = unique_counts(item_keys[i_msg])
    want = unique_counts((np.searchsorted(msg_phy, e_phy) << 31) | e_kh)
    keys = unique_sorted(np.concatenate((got[0], want[0])))
    g = _lookup(got, keys)
    w_ = _lookup(want, keys)
    extra_keys = keys[g > w_]
    missing = w_ > g
    if open_end:
        missing &= msg_phy[keys >> 31] != hi
    if open_start:
        missing &= msg_phy[keys >> 31] != lo
    missing_keys = keys[missing]
    if len(extra_keys):
        sel = np.flatnonzero(member_of(item_keys, extra_keys) & i_msg)
        for fi in unique_sorted(i_file[sel]).tolist():
            s = sel[i_file[sel] == fi]
            report.add(files[fi].path, i_off[s], "extra",
                       [f"no index key of the message at {p} hashes to {k}" for p, k in zip(i_phy[s][:MAX_LISTED_PER_KIND].tolist(), i_kh[s][:MAX_LISTED_PER_KIND].tolist())])
    if len(missing_keys):
        m_phy = msg_phy[missing_keys >> 31]
        m_kh = missing_keys & 0x7FFFFFFF
        n_missing = (w_ - g)[missing]
        # Attribute each missing entry to the file whose offset range holds it (else the nearest before).
        begins = np.array([a["phy"].min() if a is not None and len(a["phy"]) else -1 for a in per_file])
        fi = np.clip(np.searchsorted(begins, m_phy, side="right") - 1, 0, len(files) - 1)
        for f_i in unique_sorted(fi).tolist():
            s = np.flatnonzero(fi == f_i)
            report.add(files[f_i].path, np.zeros(int(n_missing[s].sum()), np.int64), "missing",
                       [f"entry (phyOffset {p}, keyHash {k}) the CommitLog implies is not indexed"
                        for p, k in zip(np.repeat(m_phy[s], n_missing[s])[:MAX_LISTED_PER_KIND].tolist(),
                                        np.repeat(m_kh[s], n_missing[s])[:MAX_LISTED_PER_KIND].tolist())])
    return report


def _lookup(counted: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    k, c = counted
    pos = np.searchsorted(k, keys)
    pos = np.minimum(pos, max(len(k) - 1, 0))
    return np.where((len(k) > 0) & (k[pos] == keys), c[pos] if len(k) else 0, 0)


def open_for_verify(index_dir, hash_slot_num: int | None, index_num: int | None, report: VerifyReport
                    ) -> tuple[list[IndexFile], dict | None]:
    """Open every file; a file that cannot even be opened (wrong size) becomes a problem, not an abort."""
    from pathlib import Path

    from rocketidx.output import INDEX_DIR, read_manifest
    p = Path(index_dir)
    manifest = read_manifest(p)
    if manifest is None and p.name == INDEX_DIR:
        manifest = read_manifest(p.parent)
        p = p.parent if manifest is not None else p
    if manifest is not None:
        hash_slot_num = hash_slot_num or manifest["hash_slot_num"]
        index_num = index_num or manifest["index_num"]
        directory = p / INDEX_DIR
        names = [f["name"] for f in manifest["files"]]
    else:
        directory = p / INDEX_DIR if (p / INDEX_DIR).is_dir() else p
        names = sorted(e.name for e in os.scandir(directory) if e.is_file() and not e.name.startswith("."))
    hash_slot_num = hash_slot_num or L.DEFAULT_HASH_SLOT_NUM
    index_num = index_num or L.DEFAULT_INDEX_NUM
    files = []
    for n in names:
        try:
            files.append(IndexFile(directory / n, hash_slot_num, index_num, check=False))
        except CorruptIndexError as e:
            report.add(e.path, e.offset, "size", e.reason)
    return files, manifest
