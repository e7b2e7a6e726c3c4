"""The parses of the broker's record check that can throw on a well-formed record.

``CommitLog.checkMessageAndReturnSize`` parses a DELAY property on ``SCHEDULE_TOPIC_XXXX`` with
``Integer.parseInt`` and, when both are present, INNER_BASE with ``Long.parseLong`` and INNER_NUM with
``Short.parseShort``; an exception makes the record invalid and ends reading there, as a bad CRC does
(docs/formats.md, "Reading the CommitLog"). :func:`java_parse_integer` is Java's rule; :func:`first_thrown`
finds the first record of a batch where it throws. The compiled kernel accepts plain ASCII values itself
and hands any other record here, so this is the one place the rule lives.
"""
from __future__ import annotations

import unicodedata

import numpy as np

from rocketidx.commitlog.keys import java_utf8_decode
import rocketidx.layout as L


def java_parse_integer(s: str, bits: int = 32) -> int | None:
    """Java's ``Integer.parseInt`` (``bits`` 32), ``Long.parseLong`` (64) or ``Short.parseShort`` (16), or
    None where it throws: an optional sign, then one or more Unicode decimal digits of the BMP (``３`` is 3;
    ``𝟑`` is two surrogate chars, neither a digit), within the range; no whitespace, no underscores."""
    if not s:
        return None
    sign, digits = (-1, s[1:]) if s[0] == "-" else (1, s[1:]) if s[0] == "+" else (1, s)
    if not digits:
        return None
    value = 0
    for ch in digits:
        d = unicodedata.decimal(ch, None) if ord(ch) <= 0xFFFF else None
        if d is None:
            return None
        value = value * 10 + d
    value *= sign
    return value if -(1 << (bits - 1)) <= value < (1 << (bits - 1)) else None


_SCHEDULE_TOPIC = L.SCHEDULE_TOPIC.encode()


def _java_parse_problem(topic: bytes, delay: bytes | None, inner_num: bytes | None, inner_base: bytes | None
                        ) -> str | None:
    """Why ``checkMessageAndReturnSize`` would throw on a well-formed record's properties, or None."""
    if topic == _SCHEDULE_TOPIC and delay is not None and java_parse_integer(java_utf8_decode(delay)) is None:
        return f"DELAY {java_utf8_decode(delay)!r} on {L.SCHEDULE_TOPIC} is not a Java int (Integer.parseInt throws)"
    if inner_num is not None and inner_base is not None:
        if java_parse_integer(java_utf8_decode(inner_base), 64) is None:
            return f"INNER_BASE {java_utf8_decode(inner_base)!r} is not a Java long (Long.parseLong throws)"
        if java_parse_integer(java_utf8_decode(inner_num), 16) is None:
            return f"INNER_NUM {java_utf8_decode(inner_num)!r} is not a Java short (Short.parseShort throws)"
    return None


def first_thrown(u8: np.ndarray, recs: np.ndarray, data: np.ndarray, offs: np.ndarray, ranges: dict
                 ) -> tuple[int, str] | None:
    """The first record whose DELAY (schedule topic) or INNER_NUM/INNER_BASE Java cannot parse: (row, why)."""
    def value(name: str, i: int) -> bytes | None:
        found, start, length = ranges[name]
        return bytes(data[start[i]:start[i] + length[i]]) if found[i] else None

    sched = recs[:, L.REC_TOPIC_LEN] == len(_SCHEDULE_TOPIC)
    inner = ranges[L.PROPERTY_INNER_NUM][0] & ranges[L.PROPERTY_INNER_BASE][0]
    for i in np.flatnonzero((sched & ranges[L.PROPERTY_DELAY][0]) | inner):
        topic = bytes(u8[recs[i, L.REC_TOPIC_POS]:recs[i, L.REC_TOPIC_POS] + recs[i, L.REC_TOPIC_LEN]])
        why = _java_parse_problem(topic, value(L.PROPERTY_DELAY, i), value(L.PROPERTY_INNER_NUM, i),
                                  value(L.PROPERTY_INNER_BASE, i))
        if why:
            return int(i), why
    return None
