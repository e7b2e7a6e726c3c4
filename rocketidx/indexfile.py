"""Entries <-> IndexFile bytes: the streaming writer, the reader, key queries and the sanity check.

Writer in: one window's entries ``(phy_offset, key_hash, store_timestamp_ms)`` in CommitLog order, in
batches. Writer out: that window's files, each created at full size but sparse, items appended with
positional writes, slot table and header written last; :class:`FileInfo` per file.
Reader in: a file path and the two sizes (:class:`FileRef`). Reader out: the header; items and slots
in chunks by positional reads (:func:`iter_items`, :func:`iter_slots`: the one place that reads them
in bulk, and checks that every read is whole); for a query's chain walk, numpy views over a mapping
(:class:`IndexFile`), and :func:`query_offsets` answers with ``IndexService.queryOffset`` semantics.
Directory in: a build output, its ``index/``, or a broker's ``store/index``. Directory out:
:class:`IndexDir` (:func:`open_index_dir`: the files oldest first and the sizes, resolved by one rule).

Stays true: every byte equals what ``IndexFile.putKey`` writes for the same entries (see the quirks in
:mod:`rocketidx.layout`); memory per writer is its slot table plus one batch; a file in a writer's
directory is complete only once the writer has closed it, and callers stage that directory.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Iterator, Sequence

import numpy as np

from rocketidx import layout as L
from rocketidx import storage
from rocketidx.errors import ConfigError, CorruptIndexError, StoreLayoutError
from rocketidx.keys import key_hash_py, slot_of
from rocketidx.manifest import CURRENT, CURRENT_FILE, INDEX_DIR, MANIFEST, Manifest, ManifestFile, version_named

_SLOT_BLOCK = 1024  # slots per written block (4 KiB): untouched blocks stay holes in the sparse file
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
        return cls(int(h["begin_timestamp_ms"]), int(h["end_timestamp_ms"]), int(h["begin_phy_offset"]),
                   int(h["end_phy_offset"]), int(h["hash_slot_count"]), int(h["index_count"]))


@dataclass
class FileInfo:
    """One written file: what the manifest records and the driver checks before committing."""

    name: str  # staging name; the committed name is assigned in (window, seq) order
    window_id: int
    window_start_ms: int
    seq: int
    header: Header
    created_with_end_phy_offset: int = 0
    created_with_end_timestamp: int = 0

    @property
    def entries(self) -> int:
        return self.header.index_count - L.FIRST_INDEX

    def as_row(self) -> dict:
        d = {"name": self.name, "window_id": self.window_id, "window_start_ms": self.window_start_ms,
             "seq": self.seq}
        d.update(asdict(self.header))
        return d

    def committed_as(self, name: str) -> ManifestFile:
        """The manifest's row for this file under its committed name."""
        h = self.header
        return ManifestFile(name, self.window_id, self.window_start_ms, self.seq, h.begin_timestamp, h.end_timestamp,
                            h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count, h.index_count, self.entries)


def time_diffs(store_ts: np.ndarray, begin_ts: int) -> np.ndarray:
    """``putKey``'s time diff: seconds since the header's begin, 0 without a begin, clamped to int32."""
    if begin_ts <= 0:
        return np.zeros(len(store_ts), np.int64)
    diff = np.floor_divide(store_ts - begin_ts, 1000)  # negative diffs end up 0 either way
    return np.clip(diff, 0, L.MAX_TIME_DIFF_S, out=diff)


@dataclass
class _OpenFile:
    path: str
    fd: int
    header: Header
    slots: np.ndarray  # the whole slot table, kept in the file's byte order so a flush writes it as is
    created_with: tuple[int, int]


def at_or_above_end(phy: np.ndarray, end_phy_offset: int) -> np.ndarray:
    """Mask of the entries ``buildIndex`` puts, of one window's entries in CommitLog order: it skips a
    message whose phyOffset is below the current file's endPhyOffset (``end_phy_offset`` before the
    first; a rolled file inherits the full file's end), so the bound is the running maximum."""
    running = np.maximum.accumulate(np.concatenate(([end_phy_offset], phy)))[:-1]
    return phy >= running


class WindowWriter:
    """Writes one window's entries into its sequence of IndexFiles in ``directory``.

    Feed it entries in CommitLog order with :meth:`add`; :meth:`close` finishes the last file and
    returns every file's :class:`FileInfo`. :meth:`suspend`/:meth:`resume` release and reload the slot
    table, so a caller juggling many windows keeps memory bounded.
    """

    def __init__(self, directory: str | os.PathLike, window_id: int, window_ms: int,
                 hash_slot_num: int = L.DEFAULT_HASH_SLOT_NUM, index_num: int = L.DEFAULT_INDEX_NUM):
        if hash_slot_num <= 0 or index_num <= L.FIRST_INDEX:
            raise ConfigError("hash_slot_num/index_num", (hash_slot_num, index_num),
                              "need at least 1 slot and 2 items (item 0 is never used)")
        self.directory = str(directory)
        self.window_id, self.window_ms = window_id, window_ms
        self.hash_slot_num, self.index_num = hash_slot_num, index_num
        self.file_size = L.index_file_size(hash_slot_num, index_num)
        self.items_at = L.items_offset(hash_slot_num)
        self.files: list[FileInfo] = []
        self.current: _OpenFile | None = None
        self.suspended: tuple[str, Header, tuple[int, int]] | None = None
        self.end_phy_offset = 0  # of the window's current file: buildIndex skips messages below it
        self.skipped_below_end = 0
        self.first_skipped_at: int | None = None  # CommitLog offset of the first record a skip hit
        self.entries = 0

    # -- files ----------------------------------------------------------------------------------

    def _new_file(self, seed: Header | None) -> None:
        seq = len(self.files) + (1 if self.current is not None else 0)
        from rocketidx.windows import staging_name
        path = os.path.join(self.directory, staging_name(self.window_id, seq, self.window_ms))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(fd, self.file_size)  # sparse: only written blocks take disk
        if seed is None:
            header, created = Header(), (0, 0)
        else:  # IndexService.getAndCreateLastIndexFile seeds a rolled file from the full one's end
            header = Header(begin_timestamp=seed.end_timestamp, end_timestamp=seed.end_timestamp,
                            begin_phy_offset=seed.end_phy_offset, end_phy_offset=seed.end_phy_offset)
            created = (seed.end_phy_offset, seed.end_timestamp)
        self.current = _OpenFile(path, fd, header, np.zeros(self.hash_slot_num, L.SLOT), created)

    def _finish_file(self) -> None:
        f = self.current
        assert f is not None
        self._flush(f)
        # Durable before anyone can publish it: a commit point (a build's pointer swap, a backfill's
        # checkpoint) must never name a file whose pages a power cut could still lose.
        os.fdatasync(f.fd)
        os.close(f.fd)
        self.files.append(FileInfo(os.path.basename(f.path), self.window_id, self.window_id * self.window_ms,
                                   len(self.files), f.header, *f.created_with))
        self.current = None

    def _flush(self, f: _OpenFile) -> None:
        """Write the slot table's non-empty blocks and the header (the header last, as the broker does)."""
        slots = f.slots
        pad = (-len(slots)) % _SLOT_BLOCK
        blocks = np.concatenate([slots.view(np.int32), np.zeros(pad, np.int32)]).reshape(-1, _SLOT_BLOCK)
        used = np.flatnonzero(blocks.any(axis=1))
        if len(used) * 4 > len(blocks):  # mostly used: one write beats many and holes save little
            used = np.arange(used[0], used[-1] + 1)
        if len(used):
            # Contiguous runs of used blocks become one write each.
            breaks = np.flatnonzero(np.diff(used) != 1)
            run_starts = np.concatenate(([used[0]], used[breaks + 1]))
            run_ends = np.concatenate((used[breaks], [used[-1]])) + 1
            for b0, b1 in zip(run_starts.tolist(), run_ends.tolist()):
                lo, hi = b0 * _SLOT_BLOCK, min(b1 * _SLOT_BLOCK, len(slots))
                os.pwrite(f.fd, slots[lo:hi], L.slots_offset() + lo * L.SLOT.itemsize)
        os.pwrite(f.fd, f.header.to_bytes(), 0)

    # -- entries --------------------------------------------------------------------------------

    def add(self, phy_offset: np.ndarray, key_hash: np.ndarray, store_timestamp_ms: np.ndarray,
            positions: np.ndarray | None = None) -> None:
        """Put a batch of entries, in CommitLog order (``IndexService.buildIndex`` + ``putKey``).

        ``positions``: each entry's record offset in the CommitLog, where it is not ``phy_offset`` (a
        PHYSICALOFFSET field that lies); only used to say where the first skipped entry came from."""
        if self.suspended is not None:
            self.resume()
        phy = np.asarray(phy_offset, np.int64)
        kh = np.asarray(key_hash, np.int64)
        ts = np.asarray(store_timestamp_ms, np.int64)
        if len(phy) == 0:
            return
        keep = at_or_above_end(phy, self.end_phy_offset)
        if not keep.all():
            self.skipped_below_end += int((~keep).sum())
            if self.first_skipped_at is None:  # entries come in CommitLog order: the first skip is the first
                self.first_skipped_at = int((phy if positions is None else np.asarray(positions))[np.argmin(keep)])
            phy, kh, ts = phy[keep], kh[keep], ts[keep]
            if len(phy) == 0:
                return
        lo = 0
        while lo < len(phy):
            if self.current is None:
                self._new_file(None)
            elif self.current.header.index_count >= self.index_num:
                full = self.current.header
                self._finish_file()
                self._new_file(full)
            room = self.index_num - self.current.header.index_count
            hi = min(len(phy), lo + room)
            self._put(phy[lo:hi], kh[lo:hi], ts[lo:hi])
            lo = hi
        self.end_phy_offset = int(phy[-1])
        self.entries += len(phy)

    def _put(self, phy: np.ndarray, kh: np.ndarray, ts: np.ndarray) -> None:
        f = self.current
        h = f.header
        n = len(phy)
        first = h.index_count
        slot = slot_of(kh, self.hash_slot_num)
        # Chains: within the batch each item links to the previous item of its slot; the first item of
        # a slot links to what the slot table held (0 = empty). One sort of (slot, position) keys gives
        # the groups in order (a value sort of int64 is ~5x faster than a stable argsort here).
        key = np.sort((slot << 32) | np.arange(n, dtype=np.int64))
        s_sorted = key >> 32
        order = key & 0xFFFFFFFF
        new_group = np.empty(n, bool)
        new_group[0] = True
        np.not_equal(s_sorted[1:], s_sorted[:-1], out=new_group[1:])
        prev_sorted = np.empty(n, np.int64)
        prev_sorted[1:] = order[:-1] + first
        heads = s_sorted[new_group]
        slot_values = f.slots[heads].astype(np.int64)
        slot_values[(slot_values <= L.INVALID_INDEX) | (slot_values > first)] = L.INVALID_INDEX
        prev_sorted[new_group] = slot_values
        prev = np.empty(n, np.int64)
        prev[order] = prev_sorted
        last_of_group = np.empty(n, bool)
        last_of_group[-1] = True
        last_of_group[:-1] = new_group[1:]
        f.slots[s_sorted[last_of_group]] = order[last_of_group] + first

        items = np.empty(n, L.INDEX_ITEM)
        items["key_hash"] = kh
        items["phy_offset"] = phy
        if first <= L.FIRST_INDEX:  # the first entry's diff uses the old begin; later ones its time
            diffs = time_diffs(ts, int(ts[0]))
            diffs[0] = time_diffs(ts[:1], h.begin_timestamp)[0]
        else:
            diffs = time_diffs(ts, h.begin_timestamp)
        items["time_diff_s"] = diffs
        items["prev_index"] = prev
        # Positional writes, not a mapping: dirty mapped pages would count against the task's memory.
        os.pwrite(f.fd, items, self.items_at + first * L.INDEX_ITEM.itemsize)

        new_slots = int((slot_values == L.INVALID_INDEX).sum())
        f.header = Header(
            begin_timestamp=int(ts[0]) if first <= L.FIRST_INDEX else h.begin_timestamp,
            end_timestamp=int(ts[-1]),
            begin_phy_offset=int(phy[0]) if first <= L.FIRST_INDEX else h.begin_phy_offset,
            end_phy_offset=int(phy[-1]),
            hash_slot_count=h.hash_slot_count + new_slots,
            index_count=first + n,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def suspend(self) -> None:
        """Write the current file's state and drop its slot table from memory."""
        if self.current is None:
            return
        f = self.current
        self._flush(f)
        os.close(f.fd)
        self.suspended = (f.path, f.header, f.created_with)
        self.current = None

    def resume(self) -> None:
        path, header, created = self.suspended
        fd = os.open(path, os.O_RDWR)
        raw = os.pread(fd, self.hash_slot_num * L.SLOT.itemsize, L.slots_offset())
        slots = np.frombuffer(raw, L.SLOT).copy()
        self.current = _OpenFile(path, fd, header, slots, created)
        self.suspended = None

    def close(self) -> list[FileInfo]:
        if self.suspended is not None:  # suspend() already wrote slots and header: sync and record the file
            path, header, created = self.suspended
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            self.files.append(FileInfo(os.path.basename(path), self.window_id, self.window_id * self.window_ms,
                                       len(self.files), header, *created))
            self.suspended = None
        if self.current is not None:
            self._finish_file()
        return self.files

    def abort(self) -> None:
        """Close without finishing: for error paths (the staging directory is discarded)."""
        if self.current is not None:
            os.close(self.current.fd)
            self.current = None


# --- reading ------------------------------------------------------------------------------------

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


# --- an index directory -------------------------------------------------------------------------

SIZE_SOURCES = ("argument", "manifest", "files", "default")  # where a size comes from, first found wins


@dataclass(frozen=True)
class IndexDir:
    """An index directory as every reader opens it (:func:`open_index_dir`).

    ``directory``: where the files are (``OUT/index`` of a build output, else the directory itself);
    ``names``: its IndexFiles, oldest first (the manifest's order, else name order, as the broker loads
    them); the sizes they were written with, and where each came from (one of :data:`SIZE_SOURCES`);
    ``manifest``: the build's :class:`rocketidx.manifest.Manifest`, None for a bare directory.
    """

    directory: str
    names: tuple[str, ...]
    hash_slot_num: int
    index_num: int
    hash_slot_num_from: str
    index_num_from: str
    manifest: Manifest | None = None

    @property
    def paths(self) -> list[str]:
        return [storage.join(self.directory, n) for n in self.names]

    def open(self, *, check: bool = True) -> list[IndexFile]:
        """Every file, oldest first; a file of the wrong size (or, with ``check``, a bad header) raises
        :class:`CorruptIndexError` naming it."""
        return [IndexFile(p, self.hash_slot_num, self.index_num, check=check) for p in self.paths]


def _pinned(p: str) -> str:
    """A build output's committed version directory, resolved once, so that its manifest and its files come
    from one version even while a build swaps it: the local layout's ``OUT/current`` symlink, or the
    remote layout's ``OUT/CURRENT`` file (a URI, or a ``file://`` output written by an earlier release);
    any other directory as it is."""
    parent = storage.parent(p) if storage.basename(p) == INDEX_DIR else None
    for root in (p, parent):
        if root is None:
            continue
        # Only the layout a build leaves: a hand-placed _manifest.json (not a link) is read as it is.
        target = storage.readlink(storage.join(root, CURRENT))
        if target is not None and storage.readlink(storage.join(root, MANIFEST)) is not None:
            return storage.join(root, target)
        pointer = storage.read_bytes(storage.join(root, CURRENT_FILE)) \
            if storage.stat(storage.join(root, MANIFEST)) is None else None
        if pointer is not None:
            return storage.join(root, version_named(pointer, storage.redact(storage.join(root, CURRENT_FILE))))
    return p


def open_index_dir(path: str | os.PathLike, hash_slot_num: int | None = None, index_num: int | None = None,
                   *, missing_ok: bool = False) -> IndexDir:
    """The index under ``path`` (a local path or a URI): a build output (with ``_manifest.json``, or
    the remote layout's ``CURRENT``), its ``index/`` directory, or a bare directory of IndexFiles such as
    a broker's ``store/index``. Nothing is opened yet.

    Each size comes from the argument, else the manifest, else what a bare directory's files tell
    (:func:`infer_sizes`), else the broker default (``MessageStoreConfig``): the one place that says so.
    The files are the manifest's, else every regular file whose name does not start with a dot. A path
    that is not a directory raises :class:`StoreLayoutError`, unless ``missing_ok`` (a broker store with
    no ``index/`` yet): then there are no files, and the sizes are the arguments' or the defaults.
    """
    p = storage.normalize(path)
    shown = storage.redact(p)
    manifest = None
    sizes: list[int] | None = None
    found = storage.stat(p)
    if found is None or found.kind != storage.DIR:
        if not missing_ok:
            raise StoreLayoutError(shown, "not a directory" if found is not None else "no such directory")
        directory, names = p, []
    else:
        p = _pinned(p)
        manifest = Manifest.read(p)
        if manifest is None and storage.basename(p) == INDEX_DIR:
            parent = storage.parent(p)
            manifest = Manifest.read(parent)
            p = parent if manifest is not None else p
        if manifest is not None:
            directory, names = storage.join(p, INDEX_DIR), manifest.names
        else:
            entries = {e.name: e for e in storage.listdir(p)}
            if INDEX_DIR not in entries and "commitlog" in entries and entries["commitlog"].kind == storage.DIR \
                    and not missing_ok:
                raise StoreLayoutError(shown, "a store with a commitlog/ but no index/ directory: nothing is "
                                              "indexed here yet (rocketidx build or backfill makes one)")
            if INDEX_DIR in entries and entries[INDEX_DIR].kind == storage.DIR:
                directory = storage.join(p, INDEX_DIR)
                entries = {e.name: e for e in storage.listdir(directory)}
            else:
                directory = p
            files = [e for e in entries.values() if e.kind == storage.FILE and not e.name.startswith(".")]
            names = sorted(e.name for e in files)
            sizes = [entries[n].size for n in names]
    if manifest is not None:
        told = (manifest.hash_slot_num, manifest.index_num)
    else:
        told = infer_sizes([storage.join(directory, n) for n in names], hash_slot_num, index_num, sizes=sizes)
    told_by = "manifest" if manifest is not None else "files"
    resolved = []
    for given, known, default in zip((hash_slot_num, index_num), told, (L.DEFAULT_HASH_SLOT_NUM, L.DEFAULT_INDEX_NUM)):
        resolved.append(next((v, source) for v, source in ((given, "argument"), (known, told_by), (default, "default"))
                             if v))
    (hs, hs_from), (n, n_from) = resolved
    return IndexDir(str(directory), tuple(names), hs, n, hs_from, n_from, manifest)


def query_offsets(files: list[IndexFile], topic: str, key: str, begin: int = 0, end: int = 2**63 - 1,
                  max_num: int = L.DEFAULT_MAX_MSGS_NUM_BATCH,
                  max_msgs_num_batch: int = L.DEFAULT_MAX_MSGS_NUM_BATCH) -> list[int]:
    """``IndexService.queryOffset`` over ``files`` (oldest first): offsets in the broker's order."""
    max_num = min(max_num, max_msgs_num_batch)
    kh = key_hash_py(f"{topic}#{key}")
    out: list[int] = []
    for f in reversed(files):
        if f.is_time_matched(begin, end):
            f.select_phy_offsets(out, kh, max_num, begin, end)
        if f.header.begin_timestamp < begin:
            break
        if len(out) >= max_num:
            break
    return out
