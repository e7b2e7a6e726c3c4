"""Judging IndexFile items against the CommitLog's entries: the pure core both engines call.

In: a window's items (:class:`ItemRows`) and the entries the log says belong there (:class:`EntryRows`),
with :class:`ContentParams`. Out: :class:`Found` rows (kind, file, offset, the two values compared).
Stays true: no I/O and no Spark here, so the in-process verify and the Spark verify judge the same rows
the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rocketidx.arrays import member_of, unique_counts, unique_sorted
from rocketidx.index.writer import time_diffs
import rocketidx.layout as L


CANDIDATE = "candidate"  # an item at an offset where no entry starts, when the caller knows no messages


@dataclass(frozen=True)
class ContentParams:
    """What judging any stretch needs to know about the files (by file number) and the covered range."""

    items_at: tuple[int, ...]  # per file: byte offset of item 0
    begin_timestamps: tuple[int, ...]  # per file: the header's, from which its time diffs count
    first_offsets: tuple[int, ...]  # per file: lowest item phyOffset, -1 without items (missing -> file)
    window_ms: int | None
    window_ids: tuple[int, ...] | None
    lo: int
    hi: int
    open_start: bool
    open_end: bool
    end_timestamps: tuple[int, ...] | None = None  # per file: the header's (None: not checked)
    last_items: tuple[int, ...] | None = None  # per file: its last item's number (indexCount - 1)


@dataclass(frozen=True)
class ItemRows:
    """Items of a stretch: file number, item number, phyOffset, keyHash, time diff (int64 each)."""

    file: np.ndarray
    item: np.ndarray
    phy: np.ndarray
    kh: np.ndarray
    td: np.ndarray


@dataclass(frozen=True)
class EntryRows:
    """The entries the CommitLog implies over a stretch: phyOffset, keyHash, store time (int64 each);
    every entry of a message is in the same stretch."""

    phy: np.ndarray
    kh: np.ndarray
    ts: np.ndarray


@dataclass(frozen=True)
class Found:
    """Problems of one kind: per row the file number, byte offset, the two numbers its detail names
    (:func:`describe`) and how many problems the row stands for (``missing``: the entries of one
    (phyOffset, keyHash) pair; else 1)."""

    kind: str
    file: np.ndarray
    offset: np.ndarray
    a: np.ndarray
    b: np.ndarray
    n: np.ndarray

    @classmethod
    def of(cls, kind: str, file, offset, a=None, b=None, n=None) -> Found:
        m = len(offset)
        as64 = lambda x, fill: np.full(m, fill, np.int64) if x is None else np.asarray(x, np.int64)  # noqa: E731
        return cls(kind, as64(file, 0) if not np.isscalar(file) else np.full(m, file, np.int64),
                   np.asarray(offset, np.int64), as64(a, 0), as64(b, 0), as64(n, 1))


def describe(kind: str, a: int, b: int, window_id: int | None = None) -> str:
    """The detail of a content problem, from the two numbers :class:`Found` carries."""
    if kind == "not-a-message":
        return f"phyOffset {a} is not the start of a valid message"
    if kind == "time-diff":
        return f"time diff {a} but the message's store time gives {b}"
    if kind == "header-time":
        return f"header timestamp {a} but its entry's message was stored at {b}"
    if kind == "window":
        return f"entry's store time is outside the file's window {window_id}"
    if kind == "extra":
        return f"no index key of the message at {a} hashes to {b}"
    return f"entry (phyOffset {a}, keyHash {b}) the CommitLog implies is not indexed"


def _message_times(e_phy: np.ndarray, e_ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each message's offset (ascending) and store time, from its first entry (all share it)."""
    if not len(e_phy):
        return e_phy, e_ts
    if (np.diff(e_phy) >= 0).all():  # CommitLog order: no sort
        first = np.flatnonzero(np.concatenate(([True], e_phy[1:] != e_phy[:-1])))
        return e_phy[first], e_ts[first]
    order = np.argsort(e_phy, kind="stable")  # PHYSICALOFFSET fields out of order: the first entry wins
    s = e_phy[order]
    first = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    return s[first], e_ts[order][first]


def _counts_at(counted: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    """How often each of ``keys`` occurs, from ``unique_counts`` output (0 for keys not in it)."""
    values, counts = counted
    if not len(values):
        return np.zeros(len(keys), np.int64)
    pos = np.minimum(np.searchsorted(values, keys), len(values) - 1)
    return np.where(values[pos] == keys, counts[pos], 0)


def _header_times(h: np.ndarray, ts: np.ndarray, items: ItemRows, entries: EntryRows, params: ContentParams
                  ) -> list[Found]:
    """A file's beginTimestamp and endTimestamp are its first and last entry's store times (``putKey``
    sets them so): checked at those two items, when the stretch holds them (at most two per file, so
    looked at one by one; an offset that messages of other store times share is right if any fits)."""
    if params.end_timestamps is None or not len(h):
        return []
    last = np.asarray(params.last_items, np.int64)[items.file[h]]
    at = np.flatnonzero((items.item[h] == L.FIRST_INDEX) | (items.item[h] == last))
    rows = []
    for j in at.tolist():
        i, fi = h[j], int(items.file[h[j]])
        for name, want, is_it in (("begin_timestamp_ms", params.begin_timestamps[fi], items.item[i] == L.FIRST_INDEX),
                                  ("end_timestamp_ms", params.end_timestamps[fi], items.item[i] == last[j])):
            if not is_it or int(ts[j]) == want:
                continue
            if want in entries.ts[entries.phy == items.phy[i]]:
                continue  # a shared offset: another message there has this store time
            rows.append((fi, L.INDEX_HEADER.fields[name][1], want, int(ts[j])))
    if not rows:
        return []
    f, off, a, b = (np.array(c, np.int64) for c in zip(*rows))
    return [Found.of("header-time", f, off, a, b)]


def _clear_shared(recheck: np.ndarray, h: np.ndarray, items: ItemRows, entries: EntryRows, params: ContentParams,
                  ts_ok: tuple[np.ndarray, np.ndarray]) -> None:
    """Items whose time diff or window looked wrong, at an offset that messages of different store
    times share (PHYSICALOFFSET fields out of place make that possible): the item is right when one of
    the messages there with its keyHash has a store time that gives its diff and its window. Only such
    items are looked at one by one; a log without shared offsets never gets here with one."""
    bad_td, bad_window = ts_ok
    order = np.lexsort((entries.kh, entries.phy))
    e_phy, e_kh, e_ts = entries.phy[order], entries.kh[order], entries.ts[order]
    key = lambda p, k: (p << 32) | (k & 0xFFFFFFFF)  # noqa: E731
    e_key = key(e_phy, e_kh)
    for j in recheck.tolist():
        i = h[j]
        p, k, fi = int(items.phy[i]), int(items.kh[i]), int(items.file[i])
        a, b = np.searchsorted(e_phy, [p, p + 1])
        if len(np.unique(e_ts[a:b])) < 2:
            continue  # one store time at this offset: the verdict stands
        ka, kb = np.searchsorted(e_key, [key(p, k), key(p, k) + 1])
        cand = e_ts[ka:kb] if kb > ka else e_ts[a:b]
        td_ok = (items.item[i] == L.FIRST_INDEX) | (time_diffs(cand, params.begin_timestamps[fi]) == items.td[i])
        win_ok = np.ones(len(cand), bool)
        if params.window_ms and params.window_ids is not None:
            win_ok = np.floor_divide(cand, params.window_ms) == params.window_ids[fi]
        if (td_ok & win_ok).any():
            bad_td[j] = bad_window[j] = False


def judge_content(items: ItemRows, entries: EntryRows, params: ContentParams,
                  messages: np.ndarray | None = None) -> list[Found]:
    """The content checks of one stretch of CommitLog offsets: its items against its entries.

    Per item pointing at a message with entries: its time diff against the message's store time (not
    for item 1: a rolled file's first diff counts from the previous file's end), and the message's
    window against the file's; over the stretch, items and entries as multisets of (message, keyHash):
    surplus keys make every item holding them ``extra``, missing entries are ``missing`` (but for the
    message at ``lo``/``hi`` with ``open_start``/``open_end``), owned by the file whose offset range
    holds them, else the nearest before. An item at an offset where no entry starts is, with
    ``messages`` (the stretch's message offsets, ascending), ``extra`` when a message starts there (one
    that makes no entry) and ``not-a-message`` otherwise; without, a :data:`CANDIDATE` for the caller to
    decide. Rows of each kind come in item order (``missing`` in (phyOffset, keyHash) order), so a caller
    feeding stretches in CommitLog order lists problems as one pass would.
    """
    i_file, i_phy, i_kh = items.file, items.phy, items.kh
    i_off = np.asarray(params.items_at, np.int64)[i_file] + L.INDEX_ITEM.itemsize * items.item
    u_phy, u_ts = _message_times(entries.phy, entries.ts)
    pos = np.minimum(np.searchsorted(u_phy, i_phy), max(len(u_phy) - 1, 0))
    has = u_phy[pos] == i_phy if len(u_phy) else np.zeros(len(i_phy), bool)
    out = []
    at_message = member_of(i_phy, messages) if messages is not None else None
    lone = ~has if at_message is None else ~has & ~at_message
    if lone.any():
        out.append(Found.of(CANDIDATE if messages is None else "not-a-message", i_file[lone], i_off[lone],
                            i_phy[lone], i_kh[lone]))
    h = np.flatnonzero(has)
    ts = u_ts[pos[h]]
    td_at = i_off[h] + L.INDEX_ITEM.fields["time_diff_s"][1]
    bad_td, bad_window = np.zeros(len(h), bool), np.zeros(len(h), bool)
    exp_td = np.zeros(len(h), np.int64)
    for fi in unique_sorted(i_file[h]).tolist():
        s = np.flatnonzero(i_file[h] == fi)
        exp_td[s] = time_diffs(ts[s], params.begin_timestamps[fi])
        bad_td[s] = (items.item[h[s]] != L.FIRST_INDEX) & (exp_td[s] != items.td[h[s]])
        if params.window_ms and params.window_ids is not None:
            bad_window[s] = np.floor_divide(ts[s], params.window_ms) != params.window_ids[fi]
    out.extend(_header_times(h, ts, items, entries, params))
    recheck = np.flatnonzero(bad_td | bad_window)
    if len(recheck):
        _clear_shared(recheck, h, items, entries, params, ts_ok=(bad_td, bad_window))
    if bad_td.any():
        out.append(Found.of("time-diff", i_file[h[bad_td]], td_at[bad_td], items.td[h[bad_td]], exp_td[bad_td]))
    if bad_window.any():
        out.append(Found.of("window", i_file[h[bad_window]], i_off[h[bad_window]]))
    # Coverage: (message rank, keyHash) multisets; a damaged negative keyHash keeps its 32 bits, so it
    # matches no entry and stays apart from every other key.
    want = unique_counts((np.searchsorted(u_phy, entries.phy).astype(np.int64) << 32) | entries.kh)
    item_keys = (pos[h].astype(np.int64) << 32) | (i_kh[h] & 0xFFFFFFFF)
    got = unique_counts(item_keys)
    keys = unique_sorted(np.concatenate((got[0], want[0])))
    g, w = _counts_at(got, keys), _counts_at(want, keys)
    extra = np.zeros(len(i_phy), bool)
    extra[h[member_of(item_keys, keys[g > w])]] = True
    if at_message is not None:
        extra |= ~has & at_message  # a message that makes no entry: any item at it is extra
    if extra.any():
        out.append(Found.of("extra", i_file[extra], i_off[extra], i_phy[extra], i_kh[extra]))
    missing = w > g
    if params.open_end:
        missing &= u_phy[keys >> 32] != params.hi
    if params.open_start:
        missing &= u_phy[keys >> 32] != params.lo
    if missing.any():
        m_phy = u_phy[keys[missing] >> 32]
        starts = np.asarray(params.first_offsets, np.int64)
        owner = np.clip(np.searchsorted(starts, m_phy, side="right") - 1, 0, len(starts) - 1)
        out.append(Found.of("missing", owner, np.zeros(len(m_phy), np.int64), m_phy, keys[missing] & 0xFFFFFFFF,
                            (w - g)[missing]))
    return out
