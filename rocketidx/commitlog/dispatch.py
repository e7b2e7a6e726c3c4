"""Records -> the ConsumeQueue entries they dispatch (``CommitLogDispatcherBuildConsumeQueue``).

In: a segment's bytes and its records array (:mod:`rocketidx.commitlog.records`), in CommitLog order, and
the broker's delay table. Out: :class:`Dispatched`: for each record that makes an entry, its queue
(topic as Java decodes it, QUEUEID), its QUEUEOFFSET, and the entry's three fields: the stored
PHYSICALOFFSET, TOTALSIZE and tagsCode.

Stays true (docs/formats.md, "ConsumeQueue entries": which records make an entry, and its fields):
* only transaction types NOT_TYPE (0) and COMMIT (8) make an entry; no other sysFlag bit matters;
* tagsCode is Java ``String.hashCode`` of TAGS (as ``string2messageProperties`` gives it; none: 0),
  sign-extended; on ``SCHEDULE_TOPIC_XXXX`` a DELAY level > 0 (``Integer.parseInt``, capped at the
  table's last level) makes it storeTimestamp + that level's delay instead;
* QUEUEID and QUEUEOFFSET come from the records array; TAGS hashes and topic groups too where the compiled
  reader found them while each record was in cache (``REC_TAGS_CODE``, ``REC_TOPIC_KEY``), else they are
  computed here from the bytes, with the same result; the one Python loop is over delayed messages' DELAY
  strings, which only the schedule topic carries.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import rocketidx.layout as L
from rocketidx.arrays import binary_array, gather_ranges
from rocketidx.commitlog.columns import decode_java_utf8
from rocketidx.commitlog.keys import java_string_hash
from rocketidx.commitlog.records import property_ranges
from rocketidx.commitlog.javaparse import java_parse_integer
from rocketidx.commitlog.segments import Segment
from rocketidx.errors import ConfigError, CorruptRecordError

_DELAY_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}  # ScheduleMessageService


def delay_levels_ms(table: str) -> tuple[int, ...]:
    """``messageDelayLevel`` (``"1s 5s 10s ... 2h"``) as milliseconds per level, level 1 first, parsed as
    ``ScheduleMessageService.parseDelayLevel`` does (a number and one unit of s, m, h, d)."""
    out = []
    for word in table.split(" "):
        unit = _DELAY_UNITS.get(word[-1:])
        number = java_parse_int(word[:-1]) if unit else None
        if number is None:
            raise ConfigError("messageDelayLevel", table, f"{word!r} is not a number followed by s, m, h or d")
        out.append(number * unit)
    if not out:
        raise ConfigError("messageDelayLevel", table, "no level")
    return tuple(out)


def java_parse_int(s: str) -> int | None:
    """Java ``Integer.parseInt(s)``, or None where it throws (:func:`rocketidx.commitlog.javaparse.java_parse_integer`)."""
    return java_parse_integer(s, 32)


DEFAULT_DELAYS_MS = delay_levels_ms(L.DEFAULT_DELAY_LEVELS)


class Dispatched(NamedTuple):
    """The ConsumeQueue entries of a batch of records, one row per record that makes one, CommitLog order.
    Topics come dictionary-encoded: a batch holds a handful of topics and many records of each."""

    topics: list[str]  # the distinct topics, as Java decodes them
    topic_index: np.ndarray  # int32, into ``topics``
    queue_id: np.ndarray  # int32
    queue_offset: np.ndarray  # int64
    phy_offset: np.ndarray  # int64, the stored PHYSICALOFFSET field
    size: np.ndarray  # int32, TOTALSIZE
    tags_code: np.ndarray  # int64
    position: np.ndarray  # int64, the record's segment offset (for errors)

    def __len__(self) -> int:
        return len(self.queue_id)


def dispatch(buf, seg: Segment, recs: np.ndarray, delays_ms: tuple[int, ...] = DEFAULT_DELAYS_MS) -> Dispatched:
    """The entries ``recs`` dispatch to ConsumeQueues (see the module docstring)."""
    tx = recs[:, L.REC_SYSFLAG] & L.SYSFLAG_TX_MASK
    recs = recs[(tx == 0) | (tx == L.SYSFLAG_TX_COMMIT)]
    u8 = np.frombuffer(buf, np.uint8, seg.size)
    P = recs[:, L.REC_POS]
    topics, topic_index = _topics(u8, recs)
    tags_code = recs[:, L.REC_TAGS_CODE].copy()
    unknown = np.flatnonzero(tags_code == L.TAGS_CODE_UNKNOWN)
    if len(unknown):
        tags_code[unknown] = _tags_codes(u8, recs[unknown])
    store_ts = recs[:, L.REC_STORE_TS]
    if L.SCHEDULE_TOPIC in topics:
        scheduled = topic_index == topics.index(L.SCHEDULE_TOPIC)
        tags_code = _delayed(seg, u8, recs, scheduled, store_ts, tags_code, delays_ms)
    return Dispatched(topics, topic_index, recs[:, L.REC_QUEUE_ID].astype(np.int32), recs[:, L.REC_QUEUE_OFFSET],
                      recs[:, L.REC_PHY].astype(np.int64), recs[:, L.REC_TOTAL].astype(np.int32), tags_code,
                      P.astype(np.int64))


def _tags_codes(u8: np.ndarray, recs: np.ndarray) -> np.ndarray:
    """Java ``String.hashCode`` of each record's TAGS as Java decodes it; few distinct values, each hashed once
    (no TAGS is the empty string here: 0 either way)."""
    tag_values, tag_index = _encoded(u8, recs, L.REC_TAGS_POS, L.REC_TAGS_LEN)
    return java_string_hash(pa.array(tag_values, pa.string())).astype(np.int64)[tag_index]


def _topics(u8: np.ndarray, recs: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The records' topics, dictionary-encoded. Where the reader grouped them (``REC_TOPIC_KEY``: the kernel
    compares topic bytes while the record is in cache) only one record of each group is decoded here."""
    key = recs[:, L.REC_TOPIC_KEY]
    if not len(key) or key.min() < 0:
        return _encoded(u8, recs, L.REC_TOPIC_POS, L.REC_TOPIC_LEN)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    topics, index = _encoded(u8, recs[first], L.REC_TOPIC_POS, L.REC_TOPIC_LEN)
    return topics, index[inverse.reshape(-1)]


def _encoded(u8: np.ndarray, recs: np.ndarray, pos_col: int, len_col: int) -> tuple[list[str], np.ndarray]:
    """A string field of every record, dictionary-encoded on its raw bytes: (distinct values as Java decodes
    them, each record's index). An absent field is the empty string, which hashes as no TAGS does (0). Two
    byte strings that decode alike (malformed UTF-8 becomes U+FFFD) are one value, as they are one queue
    directory or one tag to the broker."""
    d, o = gather_ranges(u8, recs[:, pos_col], np.maximum(recs[:, len_col], 0))
    enc = pc.dictionary_encode(binary_array(d, o))
    decoded = decode_java_utf8(enc.dictionary).to_pylist()
    index = enc.indices.to_numpy().astype(np.int32)
    values = list(dict.fromkeys(decoded))
    if len(values) != len(decoded):  # malformed bytes made two raw values one string
        index = np.asarray([values.index(v) for v in decoded], np.int32)[index]
    return values, index


def _delayed(seg: Segment, u8: np.ndarray, recs: np.ndarray, scheduled: np.ndarray, store_ts: np.ndarray,
             tags_code: np.ndarray, delays_ms: tuple[int, ...]) -> np.ndarray:
    """tagsCode of the schedule topic's records: storeTimestamp + the delay of their DELAY level (> 0)."""
    rows = np.flatnonzero(scheduled)
    sub = recs[rows]
    data, offs = gather_ranges(u8, sub[:, L.REC_PROPS_POS], np.maximum(sub[:, L.REC_PROPS_LEN], 0))
    found, start, length = property_ranges(data, offs, [L.PROPERTY_DELAY])[L.PROPERTY_DELAY]
    out = tags_code.copy()
    for i in np.flatnonzero(found):
        raw = bytes(data[start[i]:start[i] + length[i]])
        level = java_parse_int(raw.decode("utf-8", "replace"))
        if level is None:  # the record check stops reading before such a record; a guard, not a path
            raise CorruptRecordError(seg.path, int(sub[i, L.REC_POS]), f"DELAY {raw!r} is not a Java int")
        if level > 0:
            out[rows[i]] = store_ts[rows[i]] + delays_ms[min(level, len(delays_ms)) - 1]
    return out
