"""Segment bytes -> records: the walk that finds a range's message records, checks them, and says
where and why reading stopped.

In: the bytes of one CommitLog segment (``bytes`` or ``mmap``), its :class:`Segment` ref and a byte range
``[start, end)`` of it. Out: records arrays (one int64 row of positions per valid message record that
STARTS in the range, columns ``layout.REC_*``), in CommitLog order, plus a :class:`ReadStop` saying where
and why reading ended. :mod:`rocketidx.commitlog.columns` turns records into message columns; the
readers that walk a range or a whole log with these are in :mod:`rocketidx.commitlog.readers`.

Stays true:
* records are judged as ``CommitLog.checkMessageAndReturnSize(checkCRC=true)`` judges them at recovery:
  a blank record ends the segment; a zero TOTALSIZE (the preallocated zero tail) or the first invalid
  record (TOTALSIZE not fitting, unknown magic, body CRC mismatch, field lengths not adding up to
  TOTALSIZE) ends reading for good, and nothing after it is returned;
* two adjacent ranges of a segment together give exactly the records of the whole range: a range that
  does not start at 0 resynchronises on the first position whose PHYSICALOFFSET field equals its own
  absolute offset and whose record is well formed;
* the only Python loop per record follows TOTALSIZE (pass 1, :func:`scan_record_offsets`); every field is
  gathered with numpy at the computed offsets (pass 2).
"""
from __future__ import annotations

import errno
import os
import struct
import zlib
from array import array
from dataclasses import dataclass
from typing import Iterator
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rocketidx.arrays import gather_ranges
from rocketidx.commitlog.native import kernel, use_native
from rocketidx.commitlog.segments import Segment
import rocketidx.layout as L
from rocketidx.storage import is_uri
from rocketidx.commitlog.javaparse import first_thrown


STOP_END_OF_DATA = "end_of_data"  # zero TOTALSIZE: reading ends for good (normally)
STOP_CORRUPT = "corrupt"  # invalid record: reading ends for good
STOP_BLANK = "blank"  # blank record: the segment ends, reading goes on with the next one
STOP_SEGMENT_END = "segment_end"  # the last record ended exactly at the segment's end
STOP_RANGE_END = "range_end"  # the range ended with no stop inside it


@dataclass(frozen=True)
class ReadStop:
    """Where a segment or range read ended, and why."""

    path: str
    base_offset: int
    segment_offset: int
    kind: str
    reason: str

    @property
    def phy_offset(self) -> int:
        return self.base_offset + self.segment_offset

    @property
    def final(self) -> bool:
        """True when nothing after this point may be read (zero tail or invalid record)."""
        return self.kind in (STOP_END_OF_DATA, STOP_CORRUPT)

    def as_dict(self) -> dict:
        return {"segment": self.path.rsplit("/", 1)[-1], "segment_offset": self.segment_offset,
                "phy_offset": self.phy_offset, "kind": self.kind, "reason": self.reason}


_HEAD = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE
_PHY = struct.Struct(">q")
_PHY_AT = L.RECORD_PREFIX.fields["phy_offset"][1]
_MAGICS = (L.MAGIC_V1, L.MAGIC_V2)


def _zero_from(buf, pos: int, size: int, path: str | None = None) -> bool:
    """True when bytes ``[pos, size)`` are all zero.

    Holes of a sparse segment are skipped with ``SEEK_DATA``; data is checked in chunks whose pages are
    released right after, so checking a 1 GiB preallocated tail does not grow the process's memory.
    """
    if path is not None and not is_uri(path):
        # Only a shortcut: where the file cannot be opened again or the filesystem has no SEEK_DATA,
        # the mapped bytes below are checked instead.
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                pos = max(pos, os.lseek(fd, pos, os.SEEK_DATA))
            except OSError as e:
                if e.errno == errno.ENXIO:  # nothing but holes after pos
                    return True
            finally:
                os.close(fd)
    chunk = 8 << 20
    for lo in range(pos, size, chunk):
        hi = min(size, lo + chunk)
        if np.frombuffer(buf, np.uint8, hi - lo, lo).any():
            return False
        release_pages(buf, lo, hi)
    return True


def _end_of_data_stop(seg: Segment, buf, pos: int) -> ReadStop:
    if _zero_from(buf, pos, seg.size, seg.path):
        return ReadStop(seg.path, seg.base_offset, pos, STOP_END_OF_DATA, "end of data (zero TOTALSIZE, zero tail)")
    return ReadStop(seg.path, seg.base_offset, pos, STOP_END_OF_DATA,
                    "end of data (zero TOTALSIZE; non-zero bytes follow)")


def _head_stop(buf, seg: Segment, p: int) -> ReadStop | None:
    """The stop a record header at ``p`` makes, or None when it starts a plausible message record."""
    size = seg.size
    if size - p < 4:
        if _zero_from(buf, p, size):
            return _end_of_data_stop(seg, buf, p)
        return ReadStop(seg.path, seg.base_offset, p, STOP_CORRUPT, f"torn record header: only {size - p} bytes left")
    if size - p < 8:
        total = struct.unpack_from(">i", buf, p)[0]
        if total == 0:
            return _end_of_data_stop(seg, buf, p)
        return ReadStop(seg.path, seg.base_offset, p, STOP_CORRUPT, f"torn record header: only {size - p} bytes left")
    total, magic = _HEAD.unpack_from(buf, p)
    if total == 0:
        return _end_of_data_stop(seg, buf, p)
    if magic == L.MAGIC_BLANK:
        return ReadStop(seg.path, seg.base_offset, p, STOP_BLANK, "blank record: rest of segment is padding")
    if magic not in _MAGICS:
        return ReadStop(seg.path, seg.base_offset, p, STOP_CORRUPT, f"unknown magic code 0x{magic:08X}")
    if total < L.MIN_RECORD_SIZE or total > size - p:
        return ReadStop(seg.path, seg.base_offset, p, STOP_CORRUPT,
                        f"TOTALSIZE {total} does not fit ({size - p} bytes left in segment)")
    return None


def scan_record_offsets(buf, seg: Segment, start: int, end: int, max_records: int | None = None
                        ) -> tuple[np.ndarray, ReadStop | None]:
    """Pass 1: follow TOTALSIZE from ``start`` (a record start) while records start before ``end``.

    Returns the segment-relative offsets of plausible records (magic and size checked only) and the
    stop; the stop is None when ``max_records`` offsets were found first (go on after the last one).
    Fields are checked in pass 2, which may cut the list shorter.
    """
    offsets = array("q")
    append = offsets.append
    unpack = _HEAD.unpack_from
    size = seg.size
    p = start
    stop = None
    left = max_records if max_records is not None else -1
    while p < end and left != 0:
        if size - p >= 8:
            total, magic = unpack(buf, p)
            # The common case inline; anything unusual goes through _head_stop for its reason.
            if total >= L.MIN_RECORD_SIZE and (magic == L.MAGIC_V1 or magic == L.MAGIC_V2) and total <= size - p:
                append(p)
                p += total
                left -= 1
                continue
        stop = _head_stop(buf, seg, p)
        break
    if stop is None and left != 0:
        if p >= size:
            stop = ReadStop(seg.path, seg.base_offset, size, STOP_SEGMENT_END, "segment ends after its last record")
        else:
            stop = ReadStop(seg.path, seg.base_offset, p, STOP_RANGE_END, "range ends")
    return np.frombuffer(offsets, dtype=np.int64) if len(offsets) else np.zeros(0, np.int64), stop


def find_first_record(buf, seg: Segment, start: int, end: int, native: bool | None = None) -> int | None:
    """The first position in ``[start, end)`` where a well-formed record starts, or None.

    A record's PHYSICALOFFSET field holds its own absolute offset: that, the magic code, a TOTALSIZE that
    fits, fields that add up to TOTALSIZE, and a plausible header right after it, make a false match
    inside a message body practically impossible. ``native``: as :func:`scan_records` (the compiled kernel checks
    a candidate's fields in microseconds, numpy in a fifth of a millisecond: a plan probes hundreds).
    """
    if start == 0:
        return 0
    u8 = np.frombuffer(buf, np.uint8, seg.size)
    # Candidates: a magic code's first three bytes (shared by v1 and v2) 4 bytes after the start.
    lo = start + 4
    hi = min(end + 4 + 3, seg.size)
    pos = lo
    pattern = b"\xda\xa3\x20"
    while True:
        hit = _find(buf, pattern, pos, hi)
        if hit < 0:
            return None
        p = hit - 4
        pos = hit + 1
        if p >= end:
            return None
        if p + L.RECORD_PREFIX.itemsize > seg.size:
            continue
        if _PHY.unpack_from(buf, p + _PHY_AT)[0] != seg.base_offset + p:
            continue
        if _head_stop(buf, seg, p) is not None:
            continue
        if not _fields_add_up(buf, u8, seg, p, native):
            continue
        # PHYSICALOFFSET, magic and field lengths adding up to TOTALSIZE all agree: a body that mimics
        # all three by chance is not a practical concern. The record after it is not consulted: it may
        # be the corrupt record where reading must stop, and the scan reports that.
        return p


def _fields_add_up(buf, u8: np.ndarray, seg: Segment, p: int, native: bool | None) -> bool:
    """Whether the fields of the record whose header at ``p`` passed :func:`_head_stop` fit and add up to its
    TOTALSIZE (a Java parse that would throw on a property value does not matter here)."""
    if use_native(native):
        row = np.empty((1, L.REC_COLS), np.int64)  # per call: readers resync on several threads
        n, _, code, _, _ = kernel.scan(buf, seg.size, seg.base_offset, p, p + 1, False, row)
        return n == 1 or code == KERNEL_JAVA_CHECK
    ok, _ = _check_fields(u8, np.array([p], np.int64), seg.size)
    return bool(ok[0])


def _find(buf, pattern: bytes, start: int, end: int) -> int:
    if hasattr(buf, "find"):
        return buf.find(pattern, start, end)
    return bytes(buf[start:end]).find(pattern) + start if bytes(buf[start:end]).find(pattern) >= 0 else -1


def gather_at(u8: np.ndarray, pos: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The big-endian values of ``dtype`` at byte positions ``pos`` (one fancy index)."""
    if len(pos) and 0 <= int(pos.min()) and int(pos.max()) <= len(u8) - dtype.itemsize:
        # Rows of a sliding window over the bytes: one row copy per value, no index array per byte
        # (half the time of the general path below, measured on 1.5 M 16-byte values).
        return sliding_window_view(u8, dtype.itemsize)[pos].view(dtype).reshape(len(pos))
    idx = pos[:, None] + np.arange(dtype.itemsize)
    np.minimum(idx, len(u8) - 1, out=idx)
    return u8[idx].view(dtype).reshape(len(pos))


def property_ranges(data: np.ndarray, offs: np.ndarray, names: list[str]
                    ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Where ``string2messageProperties`` finds each name's value in every row: (found, start, length).

    ``data``/``offs`` are the concatenated properties strings (int64 offsets). A piece counts when its
    first \\x01 is past the piece's start and leaves a non-empty value; the name runs to that \\x01; a
    later piece wins. The separators are ASCII, so raw UTF-8 bytes and Java chars agree on them, and a
    malformed sequence never spans one: ranges found on raw bytes decode to the Java values.
    """
    n = len(offs) - 1
    end_all = int(offs[-1])
    seps = np.flatnonzero(data == 2)
    # Pieces: each row's first piece starts at the row, the others right after a separator that is not
    # the row's last byte. The two sets are disjoint and each sorted; merging keeps pieces in order.
    row_starts = offs[:-1][np.diff(offs) > 0]
    sep_row = np.searchsorted(offs, seps, side="right") - 1
    after = seps + 1
    after = after[after < offs[sep_row + 1]]
    starts = np.concatenate([row_starts, after])
    starts.sort(kind="stable")
    row = np.searchsorted(offs, starts, side="right") - 1
    nxt = np.searchsorted(seps, starts)
    piece_end = np.minimum(np.append(seps, end_all)[nxt], offs[row + 1])
    ones = np.flatnonzero(data == 1)
    kv = np.append(ones, end_all)[np.searchsorted(ones, starts)]
    ok = (kv > starts) & (kv < piece_end - 1)
    name_len = kv - starts
    out = {}
    for name in names:
        want = np.frombuffer(name.encode(), np.uint8)
        cand = np.flatnonzero(ok & (name_len == len(want)))
        if len(cand):
            got = data[np.minimum(starts[cand][:, None] + np.arange(len(want)), max(end_all - 1, 0))]
            cand = cand[(got == want).all(axis=1)]
        rows_c = row[cand]
        last = np.ones(len(cand), bool)  # the last matching piece of each row wins
        last[:-1] = rows_c[1:] != rows_c[:-1]
        cand, rows_c = cand[last], rows_c[last]
        found = np.zeros(n, bool)
        vstart = np.zeros(n, np.int64)
        vlen = np.zeros(n, np.int64)
        found[rows_c] = True
        vstart[rows_c] = kv[cand] + 1
        vlen[rows_c] = piece_end[cand] - kv[cand] - 1
        out[name] = (found, vstart, vlen)
    return out


def _check_fields(u8: np.ndarray, P: np.ndarray, size: int):
    """Vectorised field checks of pass 2. Returns (ok mask, dict of gathered columns and reasons)."""
    n = len(P)
    pre = gather_at(u8, P, L.RECORD_PREFIX)
    total = pre["total_size"].astype(np.int64)
    rec_end = P + total
    sys_flag = pre["sys_flag"].astype(np.int32)
    v2 = pre["magic"] == L.MAGIC_V2
    born_v6 = (sys_flag & L.SYSFLAG_BORNHOST_V6) != 0
    store_v6 = (sys_flag & L.SYSFLAG_STOREHOST_V6) != 0
    born_w = np.where(born_v6, L.IPV6_HOST_BYTES, L.IPV4_HOST_BYTES)
    store_w = np.where(store_v6, L.IPV6_HOST_BYTES, L.IPV4_HOST_BYTES)
    born_pos = P + L.RECORD_PREFIX.itemsize
    store_ts_pos = born_pos + born_w
    store_pos = store_ts_pos + L.STORE_TIMESTAMP_BYTES
    after_pos = store_pos + store_w
    body_pos = after_pos + L.RECORD_AFTER_HOSTS.itemsize

    reason = np.zeros(n, np.int8)  # 0 ok; codes index _REASONS
    bad = body_pos > rec_end
    reason[bad] = 1
    safe = lambda pos: np.where(reason == 0, pos, P)  # noqa: E731 - keep gathers inside the buffer
    after = gather_at(u8, safe(after_pos), L.RECORD_AFTER_HOSTS)
    body_len = np.where(reason == 0, after["body_length"].astype(np.int64), 0)
    bad = (reason == 0) & ((body_len < 0) | (body_pos + body_len > rec_end))
    reason[bad] = 2
    tl_pos = safe(body_pos + body_len)
    tl_bytes = np.where(v2, 2, 1)
    bad = (reason == 0) & (tl_pos + tl_bytes > rec_end)
    reason[bad] = 3
    b0 = u8[np.minimum(tl_pos, size - 1)].astype(np.int64)
    b1 = u8[np.minimum(tl_pos + 1, size - 1)].astype(np.int64)
    topic_len = np.where(v2, ((b0 << 8) | b1).astype(np.uint16).view(np.int16), b0.astype(np.uint8).view(np.int8)
                         ).astype(np.int64)
    topic_len = np.where(reason == 0, topic_len, 0)
    topic_pos = tl_pos + tl_bytes
    bad = (reason == 0) & ((topic_len < 0) | (topic_pos + topic_len + L.PROPERTIES_LENGTH_BYTES > rec_end))
    reason[bad] = 4
    pl_pos = safe(topic_pos + topic_len)
    props_len = np.where(reason == 0, gather_at(u8, pl_pos, np.dtype(">i2")).astype(np.int64), 0)
    props_pos = pl_pos + L.PROPERTIES_LENGTH_BYTES
    computed = L.record_length(v2, born_v6, store_v6, body_len, topic_len, props_len)
    bad = (reason == 0) & (computed != total)
    reason[bad] = 5
    cols = dict(pre=pre, total=total, sys_flag=sys_flag, v2=v2, born_v6=born_v6, store_v6=store_v6,
                born_pos=born_pos, store_ts_pos=store_ts_pos, store_pos=store_pos, after=after,
                body_pos=body_pos, body_len=body_len, topic_pos=topic_pos, topic_len=topic_len,
                props_pos=props_pos, props_len=props_len, computed=computed, reason=reason)
    return reason == 0, cols


_REASONS = {
    1: "record too short for its fixed fields (TOTALSIZE {total})",
    2: "BODYLENGTH {body_len} overruns the record (TOTALSIZE {total})",
    3: "TOPICLENGTH field overruns the record (TOTALSIZE {total})",
    4: "topic or PROPERTIESLENGTH overruns the record (TOTALSIZE {total})",
    5: "TOTALSIZE {total} differs from the length computed from the field lengths ({computed})",
}


def body_crcs(buf, body_pos: np.ndarray, body_len: np.ndarray) -> np.ndarray:
    """``CRC32(body) & 0x7FFFFFFF`` of each body (``UtilAll.crc32``); 0 for an empty body."""
    mv = memoryview(buf)
    out = np.zeros(len(body_pos), np.int64)
    crc32 = zlib.crc32
    for i, (p, n) in enumerate(zip(body_pos.tolist(), body_len.tolist())):
        if n > 0:
            out[i] = crc32(mv[p:p + n])
    return out & 0x7FFFFFFF


def check_records(buf, seg: Segment, P: np.ndarray, *, check_crc: bool = True
                  ) -> tuple[np.ndarray, ReadStop | None]:
    """Numpy pass 2 over records at segment offsets ``P``: the records array of the valid records
    before the first invalid one, and a corrupt stop if one was found."""
    u8 = np.frombuffer(buf, np.uint8, seg.size)
    ok, c = _check_fields(u8, P, seg.size)
    stop = None
    if check_crc:
        first_bad = int(np.argmin(ok)) if not ok.all() else len(P)
        # The broker checks the CRC before the topic and the length sum: a bad record whose body lies
        # inside it is reported as a CRC mismatch when its body is what is broken (a torn record).
        upto = first_bad + 1 if first_bad < len(P) and c["reason"][first_bad] >= 3 else first_bad
        crc = np.zeros(len(P), np.int64)
        crc[:upto] = body_crcs(buf, c["body_pos"][:upto], c["body_len"][:upto])
        stored = c["pre"]["body_crc"].astype(np.int64)
        crc_bad = (np.arange(len(P)) < upto) & (c["body_len"] > 0) & (crc != stored)
        if crc_bad.any():
            k = int(np.argmax(crc_bad))
            stop = ReadStop(seg.path, seg.base_offset, int(P[k]), STOP_CORRUPT,
                            f"body CRC mismatch (stored {int(stored[k])}, computed {int(crc[k])})")
            ok = ok & (np.arange(len(P)) < k)
    n = len(P)
    if not ok.all():
        n = int(np.argmin(ok))
        if stop is None:
            code = int(c["reason"][n])
            stop = ReadStop(seg.path, seg.base_offset, int(P[n]), STOP_CORRUPT, _REASONS[code].format(
                total=int(c["total"][n]), body_len=int(c["body_len"][n]), computed=int(c["computed"][n])))
    recs = np.zeros((n, L.REC_COLS), np.int64)
    sel = slice(0, n)
    recs[:, L.REC_POS] = P[sel]
    recs[:, L.REC_TOTAL] = c["total"][sel]
    recs[:, L.REC_V2] = c["v2"][sel]
    recs[:, L.REC_SYSFLAG] = c["sys_flag"][sel]
    recs[:, L.REC_BODY_POS] = c["body_pos"][sel]
    recs[:, L.REC_BODY_LEN] = c["body_len"][sel]
    recs[:, L.REC_TOPIC_POS] = c["topic_pos"][sel]
    recs[:, L.REC_TOPIC_LEN] = c["topic_len"][sel]
    recs[:, L.REC_PROPS_POS] = c["props_pos"][sel]
    recs[:, L.REC_PROPS_LEN] = c["props_len"][sel]
    recs[:, L.REC_PHY] = c["pre"]["phy_offset"][sel]
    recs[:, L.REC_STORE_TS] = gather_at(u8, c["store_ts_pos"][sel], np.dtype(">i8"))
    recs[:, L.REC_QUEUE_ID] = c["pre"]["queue_id"][sel]
    recs[:, L.REC_QUEUE_OFFSET] = c["pre"]["queue_offset"][sel]
    recs[:, L.REC_TAGS_CODE], recs[:, L.REC_TOPIC_KEY] = L.TAGS_CODE_UNKNOWN, -1  # the dispatch computes them
    recs[:, L.REC_MULTI_DISPATCH:L.REC_INNER_BASE_LEN + 1] = -1  # unknown: the dispatch parses the properties
    props_len = recs[:, L.REC_PROPS_LEN]
    data, offs = gather_ranges(u8, recs[:, L.REC_PROPS_POS], props_len)
    offs = offs.astype(np.int64)
    ranges = property_ranges(data, offs, [L.PROPERTY_KEYS, L.PROPERTY_UNIQ_KEY, L.PROPERTY_TAGS, L.PROPERTY_DELAY,
                                          L.PROPERTY_INNER_NUM, L.PROPERTY_INNER_BASE])
    thrown = first_thrown(u8, recs, data, offs, ranges)
    if thrown is not None:  # the broker's check throws here: reading stops at this record, as at a bad CRC
        k, why = thrown
        stop = ReadStop(seg.path, seg.base_offset, int(recs[k, L.REC_POS]), STOP_CORRUPT, why)
        recs, offs = recs[:k], offs[:k + 1]
        ranges = {name: tuple(a[:k] for a in r) for name, r in ranges.items()}
    for name, pos_col, len_col in ((L.PROPERTY_KEYS, L.REC_KEYS_POS, L.REC_KEYS_LEN),
                                   (L.PROPERTY_UNIQ_KEY, L.REC_UNIQ_POS, L.REC_UNIQ_LEN),
                                   (L.PROPERTY_TAGS, L.REC_TAGS_POS, L.REC_TAGS_LEN)):
        found, vstart, vlen = ranges[name]
        recs[:, pos_col] = np.where(found, recs[:, L.REC_PROPS_POS] + vstart - offs[:-1], 0)
        recs[:, len_col] = np.where(found, vlen, -1)
    return recs, stop


_NATIVE_STOPS = {
    2: STOP_END_OF_DATA, 3: STOP_BLANK, 4: STOP_CORRUPT, 5: STOP_CORRUPT, 6: STOP_CORRUPT, 7: STOP_CORRUPT,
    8: STOP_CORRUPT, 9: STOP_CORRUPT, 10: STOP_CORRUPT, 11: STOP_CORRUPT, 12: STOP_CORRUPT,
}
KERNEL_MORE = 13  # the kernel's output buffer is full: the next chunk starts at its stop position
KERNEL_JAVA_CHECK = 14  # a record whose DELAY or INNER_* value the kernel leaves to check_records to judge


def kernel_stop(buf, seg: Segment, pos: int, code: int, a: int, b: int, judge_tail: bool = True) -> ReadStop:
    """The kernel's stop code (any but :data:`KERNEL_MORE`) as the same ReadStop the numpy path reports.
    ``judge_tail=False``: an end of data's reason does not say whether the rest of the segment is zero (which
    reads all of it)."""
    if code == 0:
        return ReadStop(seg.path, seg.base_offset, pos, STOP_RANGE_END, "range ends")
    if code == 1:
        return ReadStop(seg.path, seg.base_offset, seg.size, STOP_SEGMENT_END, "segment ends after its last record")
    kind = _NATIVE_STOPS[code]
    if code == 2 and a < 0 and not judge_tail:
        return ReadStop(seg.path, seg.base_offset, pos, STOP_END_OF_DATA, "end of data (zero TOTALSIZE)")
    if code == 2 and a < 0:
        return _end_of_data_stop(seg, buf, pos)
    if code == 2:
        reason = "end of data (zero TOTALSIZE, zero tail)" if a else "end of data (zero TOTALSIZE; non-zero bytes follow)"
    elif code == 3:
        reason = "blank record: rest of segment is padding"
    elif code == 4:
        reason = f"unknown magic code 0x{a & 0xFFFFFFFF:08X}"
    elif code == 5:
        reason = f"TOTALSIZE {a} does not fit ({seg.size - pos} bytes left in segment)"
    elif code == 10:
        reason = f"body CRC mismatch (stored {a}, computed {b})"
    elif code == 11:
        reason = _REASONS[5].format(total=a, computed=b)
    elif code == 12:
        reason = f"torn record header: only {a} bytes left"
    else:
        reason = _REASONS[code - 5].format(total=a, body_len=b, computed=b)
    return ReadStop(seg.path, seg.base_offset, pos, kind, reason)


def handed_over(out: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` rows of the kernel's output array for the caller to keep, and the array for its next call.
    A full one is handed over whole and a new one made (copying 16 MB of rows cost more than the scan's page
    faults on fresh memory); a few rows are copied out, so a kept chunk never pins a mostly empty array."""
    if 4 * n >= len(out):
        return out[:n], np.empty_like(out)
    return out[:n].copy(), out


def scan_records(buf, seg: Segment, start: int, end: int, *, check_crc: bool = True,
                 batch_records: int = 65536, native: bool | None = None,
                 judge_tail: bool = True) -> Iterator[np.ndarray]:
    """Records starting in ``[start, end)`` (``start`` must be a record start), in chunks of at most
    ``batch_records`` rows of the records array. The generator's return value is the :class:`ReadStop`;
    ``judge_tail=False`` (a caller that only wants records, as the plan's probes): with the compiled kernel, an
    end of data does not read the rest of the segment to say whether it is all zero."""
    if use_native(native):
        out = np.empty((batch_records, L.REC_COLS), np.int64)
        p = start
        while True:
            n, p, code, a, b = kernel.scan(buf, seg.size, seg.base_offset, p, end, check_crc, out)
            if n:
                recs, out = handed_over(out, n)
                yield recs
            if code == KERNEL_JAVA_CHECK:
                one, stop = check_records(buf, seg, np.array([p], np.int64), check_crc=check_crc)
                if stop is not None:
                    return stop
                yield one
                p += int(one[0, L.REC_TOTAL])
            elif code != KERNEL_MORE:
                return kernel_stop(buf, seg, p, code, a, b, judge_tail)
    p = start
    while True:
        offsets, stop = scan_record_offsets(buf, seg, p, end, batch_records)
        if len(offsets):
            recs, corrupt = check_records(buf, seg, offsets, check_crc=check_crc)
            if len(recs):
                yield recs
            if corrupt is not None:
                return corrupt
            p = int(offsets[-1]) + int(_HEAD.unpack_from(buf, int(offsets[-1]))[0])
        if stop is not None:
            return stop


def release_pages(buf, lo: int, hi: int) -> None:
    """Drop a processed region of a mapped segment from this process's resident memory.

    The pages stay in the page cache; without this, reading a 1 GiB segment through one mapping
    would leave the whole segment counted in the task's RSS.
    """
    import mmap
    if isinstance(buf, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        page = mmap.PAGESIZE
        lo = (lo // page) * page
        hi = (hi // page) * page
        if hi > lo:
            buf.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
