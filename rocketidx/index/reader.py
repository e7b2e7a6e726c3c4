"""IndexFile bytes -> header, items and slots: the reader, and the sizes a bare directory's files tell.

In: a file path (local or URI) and the two sizes (:class:`FileRef`). Out: the header; items and slots
in chunks by positional reads (:func:`iter_items`, :func:`iter_slots`: the one place that reads them
in bulk, and checks that every read is whole); for a query's chain walk, numpy views over a mapping
(:class:`IndexFile`).
Stays true: a file shorter than its sizes say raises :class:`CorruptIndexError` naming the file and the
byte where it ended, never a short array.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from rocketidx.commitlog.keys import slot_of
from rocketidx.errors import CorruptIndexError
import rocketidx.layout as L
import rocketidx.storage as storage

CHUNK_ITEMS = 1 << 20  # items per read: 20 MiB, large enough that per-chunk numpy overhead vanishes
CHUNK_SLOTS = 1 << 22  # slots per read: 16 MiB


@dataclass(frozen=True)
class Header:
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = L.FIRST_INDEX

    def to_bytes(self) -> bytes:
        h = np.zeros(1, L.INDEX_HEADER)
        h["begin_timestamp_ms"], h["end_timestamp_ms"] = self.begin_timestamp, self.end_timestamp
        h["begin_phy_offset"], h["end_phy_offset"] = self.begin_phy_offset, self.end_phy_offset
        h["hash_slot_count"], h["index_count"] = self.hash_slot_count, self.index_count
        return h.tobytes()

    @classmethod
    def from_array(cls, h: np.ndarray) -> "Header":
        # IndexHeader.load: an indexCount of 0 or less is taken as 1 (no item). A broker killed right after it
        # created its next IndexFile leaves that file's header all zeros, and its restart loads it as empty.
        count = int(h["index_count"])
        return cls(int(h["begin_timestamp_ms"]), int(h["end_timestamp_ms"]), int(h["begin_phy_offset"]),
                   int(h["end_phy_offset"]), int(h["hash_slot_count"]), count if count > 0 else L.FIRST_INDEX)


def read_exact(f: storage.RangeFile, n: int, offset: int) -> bytes:
    """``n`` bytes at ``offset`` of an open file; a file that ends first (shorter than its sizes say, or
    cut while being read) raises :class:`CorruptIndexError` naming the file and the byte where it ended."""
    data = f.read_at(n, offset)
    if len(data) != n:
        raise CorruptIndexError(storage.redact(f.path), offset + len(data),
                                f"file ends inside a read of {n} bytes at {offset}")
    return data


def iter_items(path: str | os.PathLike, hash_slot_num: int, lo: int, hi: int, chunk: int = CHUNK_ITEMS
               ) -> Iterator[tuple[int, np.ndarray]]:
    """Items ``[lo, hi)`` of a file (a local path or a URI) as ``(first item index, INDEX_ITEM array)``
    chunks of at most ``chunk`` items, by positional reads: the page cache (or the store) holds the file,
    this process one chunk (a mapping's touched pages would count against a Spark task's memory). A short
    read raises :class:`CorruptIndexError` (:func:`read_exact`)."""
    base = L.items_offset(hash_slot_num)
    size = L.INDEX_ITEM.itemsize
    with storage.RangeFile(path) as f:
        for a in range(lo, hi, chunk):
            b = min(hi, a + chunk)
            yield a, np.frombuffer(read_exact(f, (b - a) * size, base + a * size), L.INDEX_ITEM)


def read_item_fields(path: str | os.PathLike, hash_slot_num: int, lo: int, hi: int, fields: Sequence[str],
                     chunk: int = CHUNK_ITEMS) -> dict[str, np.ndarray]:
    """Fields of items ``[lo, hi)`` as native-endian arrays of their own widths (``key_hash``,
    ``time_diff_s``, ``prev_index`` int32; ``phy_offset`` int64), read through :func:`iter_items`:
    4 or 8 bytes an item per field, plus one chunk."""
    n = max(0, hi - lo)
    out = {name: np.empty(n, L.INDEX_ITEM.fields[name][0].newbyteorder("=")) for name in fields}
    for a, items in iter_items(path, hash_slot_num, lo, hi, chunk):
        for name, arr in out.items():
            arr[a - lo:a - lo + len(items)] = items[name]
    return out


def iter_slots(path: str | os.PathLike, hash_slot_num: int, chunk: int = CHUNK_SLOTS
               ) -> Iterator[tuple[int, np.ndarray]]:
    """The slot table as ``(first slot, SLOT array)`` chunks, checked as :func:`iter_items` checks."""
    size = L.SLOT.itemsize
    with storage.RangeFile(path) as f:
        for a in range(0, hash_slot_num, chunk):
            b = min(hash_slot_num, a + chunk)
            yield a, np.frombuffer(read_exact(f, (b - a) * size, L.slots_offset() + a * size), L.SLOT)


class _RangedTable:
    """A remote file's slot table or items, read an element at a time (a query's chain walk touches a
    few) or whole in chunks (``np.asarray``); the local reader maps the file instead."""

    def __init__(self, f: storage.RangeFile, base: int, dtype: np.dtype, n: int, chunk: int):
        self.f, self.base, self.dtype, self.n, self.chunk = f, base, dtype, n, chunk

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if not isinstance(i, (int, np.integer)) or not 0 <= i < self.n:
            raise IndexError(i)
        return np.frombuffer(read_exact(self.f, self.dtype.itemsize, self.base + int(i) * self.dtype.itemsize),
                             self.dtype)[0]

    def __array__(self, dtype=None, copy=None):
        out = np.empty(self.n, self.dtype)
        for a in range(0, self.n, self.chunk):
            b = min(self.n, a + self.chunk)
            out[a:b] = np.frombuffer(read_exact(self.f, (b - a) * self.dtype.itemsize,
                                                self.base + a * self.dtype.itemsize), self.dtype)
        return out if dtype is None else out.astype(dtype)


@dataclass(frozen=True)
class FileRef:
    """What a task needs to know about one IndexFile: small and picklable (Spark ships it to executors).

    ``file_index``: the file's place in its index, oldest first. ``window_id``, ``window_start_ms``,
    ``seq``: its window and place in the window, from a build's manifest (None for a broker directory).
    ``continues_phy``: the ``end_phy_offset`` of the file this one continues (the previous file of the
    same window, or of the single sequence of a broker directory), else -1; a message whose entries
    straddle the roll-over is then counted once.
    """

    path: str
    hash_slot_num: int
    index_num: int
    file_index: int = 0
    window_id: int | None = None
    window_start_ms: int | None = None
    seq: int | None = None
    continues_phy: int = -1

    @property
    def name(self) -> str:
        return storage.basename(self.path)

    def open(self, *, check: bool = True) -> "IndexFile":
        """The file, its size checked (and with ``check`` its header): :class:`IndexFile`."""
        return IndexFile(self.path, self.hash_slot_num, self.index_num, check=check)

    def iter_items(self, lo: int, hi: int, chunk: int = CHUNK_ITEMS) -> Iterator[tuple[int, np.ndarray]]:
        """:func:`iter_items` of this file."""
        return iter_items(self.path, self.hash_slot_num, lo, hi, chunk)


class IndexFile:
    """A read-only IndexFile: its size checked, its header, and the slot table and items for a query's
    chain walk (a few items at random places): numpy views over a mapping of a local file, ranged reads
    of a remote one (header, one slot, the chain's items: a few small reads, not a download). Bulk reads
    of items go through :meth:`iter_items`."""

    def __init__(self, path: str | os.PathLike, hash_slot_num: int = L.DEFAULT_HASH_SLOT_NUM,
                 index_num: int = L.DEFAULT_INDEX_NUM, *, check: bool = True):
        self.path = storage.normalize(path)
        self.hash_slot_num, self.index_num = hash_slot_num, index_num
        expected = L.index_file_size(hash_slot_num, index_num)
        remote = storage.RangeFile(self.path) if storage.is_remote(self.path) else None  # its size: one request
        size = remote.size if remote is not None else os.path.getsize(self.path)
        if size != expected:
            raise CorruptIndexError(storage.redact(self.path), 0,
                                    f"file size {size} != 40 + 4*{hash_slot_num} + 20*{index_num} "
                                    f"= {expected}; wrong --hash-slots/--index-num?")
        if remote is not None:
            f = remote
            head = read_exact(f, L.INDEX_HEADER.itemsize, 0)
            self.header = Header.from_array(np.frombuffer(head, L.INDEX_HEADER)[0])
            self.slots = _RangedTable(f, L.slots_offset(), L.SLOT, hash_slot_num, CHUNK_SLOTS)
            self.items = _RangedTable(f, L.items_offset(hash_slot_num), L.INDEX_ITEM, index_num, CHUNK_ITEMS)
        else:
            mm = np.memmap(self.path, np.uint8, mode="r")
            self.header = Header.from_array(mm[:L.INDEX_HEADER.itemsize].view(L.INDEX_HEADER)[0])
            self.slots = mm[L.slots_offset():L.items_offset(hash_slot_num)].view(L.SLOT)
            self.items = mm[L.items_offset(hash_slot_num):].view(L.INDEX_ITEM)
        if check:
            self.check_header()

    @property
    def name(self) -> str:
        return storage.basename(self.path)

    def ref(self, file_index: int = 0) -> FileRef:
        return FileRef(self.path, self.hash_slot_num, self.index_num, file_index)

    def iter_items(self, lo: int = L.FIRST_INDEX, hi: int | None = None, chunk: int = CHUNK_ITEMS
                   ) -> Iterator[tuple[int, np.ndarray]]:
        """:func:`iter_items` of this file; ``hi`` defaults to the header's indexCount (its last item + 1)."""
        return iter_items(self.path, self.hash_slot_num, lo, self.header.index_count if hi is None else hi, chunk)

    def read_item_fields(self, lo: int, hi: int, fields: Sequence[str]) -> dict[str, np.ndarray]:
        """:func:`read_item_fields` of this file."""
        return read_item_fields(self.path, self.hash_slot_num, lo, hi, fields)

    def check_header(self) -> None:
        h = self.header
        if not (L.FIRST_INDEX <= h.index_count <= self.index_num):
            raise CorruptIndexError(storage.redact(self.path), L.INDEX_HEADER.fields["index_count"][1],
                                    f"indexCount {h.index_count} outside [1, {self.index_num}]")
        if not (0 <= h.hash_slot_count <= self.hash_slot_num):
            raise CorruptIndexError(storage.redact(self.path), L.INDEX_HEADER.fields["hash_slot_count"][1],
                                    f"hashSlotCount {h.hash_slot_count} outside [0, {self.hash_slot_num}]")

    def is_time_matched(self, begin: int, end: int) -> bool:
        """``IndexFile.isTimeMatched``."""
        b, e = self.header.begin_timestamp, self.header.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def select_phy_offsets(self, out: list[int], key_hash: int, max_num: int, begin: int, end: int) -> None:
        """``IndexFile.selectPhyOffset``: append matching offsets to ``out``, newest first."""
        count = self.header.index_count
        slot = slot_of(key_hash, self.hash_slot_num)
        if slot < 0:  # no key hashes to a negative value (indexKeyHashMethod): nothing to find
            return
        slot_value = int(self.slots[slot])
        if slot_value <= L.INVALID_INDEX or slot_value > count or count <= 1:
            return
        begin_ts = self.header.begin_timestamp
        i = slot_value
        steps = 0
        while len(out) < max_num:
            steps += 1
            if steps > count:  # RocketMQ would loop for ever on a cyclic chain; a valid one is shorter
                raise CorruptIndexError(storage.redact(self.path), L.slots_offset() + L.SLOT.itemsize * slot,
                                        f"the chain of slot {slot} loops")
            if i >= self.index_num:  # a link past the file: RocketMQ would read garbage; stop
                return
            item = self.items[i]
            time_diff = int(item["time_diff_s"])
            if time_diff < 0:
                return
            t = begin_ts + time_diff * 1000
            if int(item["key_hash"]) == key_hash and begin <= t <= end:
                out.append(int(item["phy_offset"]))
            prev = int(item["prev_index"])
            if prev <= L.INVALID_INDEX or prev > count or prev == i or t < begin:
                return
            i = prev


def infer_sizes(paths: list[str | os.PathLike], hash_slot_num: int | None = None, index_num: int | None = None,
                *, sizes: Sequence[int] | None = None) -> tuple[int | None, int | None]:
    """(hashSlotNum, indexNum) of a bare directory's files, as far as the files tell; given values win.

    A file's size is ``40 + 4*slots + 20*indexNum``: one equation, two unknowns. With one of them given,
    the size gives the other. Else a full file pins indexNum: items past indexCount are zero, so a file
    whose last 20 bytes hold an item is full and its indexCount is indexNum (every file but the newest
    of a broker's sequence is full). Files of different sizes speak by the size most of them share (a
    truncated or foreign file among them is then the odd one, which the caller reports, rather than
    every healthy file); a tie, or no full file, tells nothing: the caller falls back to the broker
    defaults and checks that they fit. ``sizes``: the files' sizes when a listing already gave them.
    """
    hs, n = hash_slot_num, index_num
    sizes = list(sizes) if sizes is not None else [storage.stat(p).size for p in paths]
    counted = Counter(sizes).most_common(2)
    if not counted or (len(counted) == 2 and counted[0][1] == counted[1][1]) or (hs is not None and n is not None):
        return hs, n
    size = counted[0][0]
    paths = [p for p, s in zip(paths, sizes) if s == size]
    rest = size - L.INDEX_HEADER.itemsize
    slot, item = L.SLOT.itemsize, L.INDEX_ITEM.itemsize
    if rest < slot + 2 * item:  # not even a header, a slot, item 0 and one item: says nothing
        return hs, n
    if n is not None:
        return ((rest - item * n) // slot if rest > item * n and (rest - item * n) % slot == 0 else None), n
    if hs is not None:
        return hs, ((rest - slot * hs) // item if rest > slot * hs and (rest - slot * hs) % item == 0 else None)
    for p in paths:
        with storage.RangeFile(p) as f:
            raw = f.read_at(L.INDEX_HEADER.itemsize, 0)
            last = f.read_at(item, size - item)
        if not any(last) or len(raw) < L.INDEX_HEADER.itemsize:
            continue
        count = int(np.frombuffer(raw, L.INDEX_HEADER)[0]["index_count"])
        if count > 1 and rest > item * count and (rest - item * count) % slot == 0:
            return (rest - item * count) // slot, count
    return None, None
