"""Java ``String.hashCode`` and the IndexFile key hash, vectorised over Arrow string arrays.

In: a pyarrow string array (valid UTF-8, as :func:`rocketidx.commitlog.columns.decode_java_utf8` leaves it).
Out: int32 numpy arrays.
Stays true: ``h = 31*h + c`` over UTF-16 code units (a character outside the BMP is a surrogate
pair), in 32-bit two's complement; ``key_hash = abs(h)`` with ``Integer.MIN_VALUE -> 0``
(``IndexFile.indexKeyHashMethod``); a key hash's slot is ``key_hash % hash_slot_num`` (:func:`slot_of`,
the one place that says so).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from rocketidx.arrays import string_buffers

_INT32_MIN = np.int32(-2**31)
_POW31 = np.ones(1, np.uint32)


def _powers_of_31(n: int) -> np.ndarray:
    """31**k mod 2**32 for k in [0, n)."""
    global _POW31
    if len(_POW31) < n:
        size = max(n, 2 * len(_POW31))
        p = np.empty(size, np.uint32)
        p[0] = 1
        p[1:] = 31
        _POW31 = np.cumprod(p, dtype=np.uint32)  # uint32 products wrap: exactly Java's int arithmetic
    return _POW31[:n]


def utf16_units(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes -> UTF-16 code units (uint32 values) and per-string unit offsets."""
    if len(data) == 0 or not (data >= 0x80).any():
        return data.astype(np.uint32), offsets  # ASCII: one unit per byte
    b = data.astype(np.uint32)
    lead = (b & 0xC0) != 0x80
    lead_pos = np.flatnonzero(lead)
    n = len(b)

    def at(k: int) -> np.ndarray:
        return b[np.minimum(lead_pos + k, n - 1)] & 0x3F

    b0 = b[lead_pos]
    cp = np.where(b0 < 0x80, b0,
         np.where(b0 < 0xE0, ((b0 & 0x1F) << 6) | at(1),
         np.where(b0 < 0xF0, ((b0 & 0x0F) << 12) | (at(1) << 6) | at(2),
                  ((b0 & 0x07) << 18) | (at(1) << 12) | (at(2) << 6) | at(3))))
    supp = cp >= 0x10000
    width = 1 + supp.astype(np.int64)
    unit_pos = np.zeros(len(cp) + 1, np.int64)
    np.cumsum(width, out=unit_pos[1:])
    units = np.empty(int(unit_pos[-1]), np.uint32)
    first = unit_pos[:-1]
    v = cp - 0x10000
    units[first] = np.where(supp, 0xD800 + (v >> 10), cp)
    units[first[supp] + 1] = 0xDC00 + (v[supp] & 0x3FF)
    # Per-string unit offsets: count the units of the characters whose lead byte lies in each string.
    cum_width_at_byte = np.zeros(n + 1, np.int64)
    per_byte = np.zeros(n, np.int64)
    per_byte[lead_pos] = width
    np.cumsum(per_byte, out=cum_width_at_byte[1:])
    return units, cum_width_at_byte[offsets]


def java_string_hash(arr: pa.Array) -> np.ndarray:
    """Java ``String.hashCode`` of every string (null -> 0, like the empty string), as int32."""
    data, offsets = string_buffers(arr)
    units, uoff = utf16_units(data, offsets)
    lengths = np.diff(uoff)
    if len(units) == 0:
        return np.zeros(len(lengths), np.int32)
    # h = sum(u_j * 31^(len-1-j)): the exponent of a unit is the distance to its string's last unit.
    ends = np.repeat(uoff[1:], lengths)
    exp = ends - 1 - np.arange(len(units))
    terms = units * _powers_of_31(int(lengths.max()))[exp]
    cs = np.zeros(len(units) + 1, np.uint32)
    np.cumsum(terms, dtype=np.uint32, out=cs[1:])
    return (cs[uoff[1:]] - cs[uoff[:-1]]).view(np.int32)


def key_hash(arr: pa.Array) -> np.ndarray:
    """``IndexFile.indexKeyHashMethod``: ``abs(hashCode)``, with ``Integer.MIN_VALUE`` -> 0. int32."""
    return hash_to_key_hash(java_string_hash(arr))


def hash_to_key_hash(h: np.ndarray) -> np.ndarray:
    h = np.asarray(h, np.int32)
    return np.where(h == _INT32_MIN, np.int32(0), np.abs(h)).astype(np.int32)


def slot_of(key_hash, hash_slot_num: int):
    """The slot-table index of a key hash: ``keyHash % hashSlotNum`` (``IndexFile.putKey``/``selectPhyOffset``).

    In: a key hash as ``indexKeyHashMethod`` makes it (``abs(String.hashCode())``, ``Integer.MIN_VALUE``
    already mapped to 0: never negative), a Python int or a numpy array. Out: the slot, an int or an
    int64 array. A negative key hash, which only a damaged item holds, has no slot: -1 (Java's ``%``
    would give a negative slot, a read inside the header; numpy's would give a plausible wrong one).
    """
    if np.isscalar(key_hash):
        k = int(key_hash)
        return k % hash_slot_num if k >= 0 else -1
    kh = np.asarray(key_hash, np.int64)
    slot = kh % hash_slot_num
    if len(kh) and int(kh.min()) < 0:  # one cheap pass; a valid file never gets here
        slot[kh < 0] = -1
    return slot


def java_string_hash_py(s: str) -> int:
    """Scalar reference: Java ``String.hashCode`` of one Python string (for queries and tests)."""
    h = 0
    for unit in np.frombuffer(s.encode("utf-16-be", "surrogatepass"), ">u2").tolist():
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def key_hash_py(s: str) -> int:
    h = java_string_hash_py(s)
    return 0 if h == -2**31 else abs(h)


REPLACEMENT = "\ufffd"


def _cont(b: int) -> bool:
    return (b & 0xC0) == 0x80


def java_utf8_decode(data: bytes) -> str:
    """``new String(bytes, UTF_8)`` as the JDK decodes malformed input (one U+FFFD per malformed unit).

    It differs from Python's "replace" handler on encoded surrogates: ``ED A0 80`` is one U+FFFD in Java
    (three in Python) and ``ED A0 41`` is U+FFFD then ``A`` (Python gives two U+FFFD). Only rows with
    malformed bytes come here, so a plain loop is fine.
    """
    out: list[str] = []
    n = len(data)
    i = 0
    while i < n:
        b1 = data[i]
        i += 1
        if b1 < 0x80:
            out.append(chr(b1))
        elif 0xC2 <= b1 <= 0xDF:
            if i < n:
                b2 = data[i]
                if _cont(b2):
                    out.append(chr(((b1 & 0x1F) << 6) | (b2 & 0x3F)))
                    i += 1
                else:
                    out.append(REPLACEMENT)
                continue
            out.append(REPLACEMENT)
            break
        elif 0xE0 <= b1 <= 0xEF:
            if i + 1 < n:
                b2, b3 = data[i], data[i + 1]
                if (b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not _cont(b2) or not _cont(b3):
                    out.append(REPLACEMENT)
                    i += 0 if ((b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not _cont(b2)) else 1
                else:
                    c = ((b1 & 0x0F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F)
                    out.append(REPLACEMENT if 0xD800 <= c <= 0xDFFF else chr(c))
                    i += 2
                continue
            if i < n and ((b1 == 0xE0 and (data[i] & 0xE0) == 0x80) or not _cont(data[i])):
                out.append(REPLACEMENT)
                continue
            out.append(REPLACEMENT)
            break
        elif 0xF0 <= b1 <= 0xF7:
            if i + 2 < n:
                b2, b3, b4 = data[i], data[i + 1], data[i + 2]
                uc = ((b1 & 0x07) << 18) | ((b2 & 0x3F) << 12) | ((b3 & 0x3F) << 6) | (b4 & 0x3F)
                if not _cont(b2) or not _cont(b3) or not _cont(b4) or not (0x10000 <= uc <= 0x10FFFF):
                    out.append(REPLACEMENT)
                    if (b1 > 0xF4 or (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF)
                            or (b1 == 0xF4 and (b2 & 0xF0) != 0x80) or not _cont(b2)):
                        pass  # only the lead byte is malformed
                    elif not _cont(b3):
                        i += 1
                    else:
                        i += 2
                else:
                    out.append(chr(uc))
                    i += 3
                continue
            if b1 > 0xF4 or (i < n and ((b1 == 0xF0 and not 0x90 <= data[i] <= 0xBF)
                                        or (b1 == 0xF4 and (data[i] & 0xF0) != 0x80) or not _cont(data[i]))):
                out.append(REPLACEMENT)
                continue
            i += 1
            out.append(REPLACEMENT)
            if i < n and not _cont(data[i]):
                continue
            break
        else:
            out.append(REPLACEMENT)
    return "".join(out)
