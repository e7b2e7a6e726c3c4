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

import re
from typing import NamedTuple

import numpy as np
import pyarrow as pa
# pyarrow.compute is imported by the functions that use it: its import takes 40 ms, which a command that never
# calls them (an incremental index build, a query) does not pay.

import rocketidx.layout as L
from rocketidx.arrays import binary_array, gather_ranges, numpy_of
from rocketidx.commitlog.columns import decode_java_utf8
from rocketidx.commitlog.keys import java_string_hash, java_utf8_decode
from rocketidx.commitlog.records import property_ranges
from rocketidx.commitlog.javaparse import java_parse_integer
from rocketidx.commitlog.native import kernel
from rocketidx.commitlog.segments import Segment
from rocketidx.config import LightQueues
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
    left_out: tuple[tuple[str, int], ...] = ()  # light-queue units the rules left out: (reason, count)

    def __len__(self) -> int:
        return len(self.queue_id)


def entry_mask(recs: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Which records (of ``rows``; None: all) make an entry: transaction types NOT_TYPE (0) and COMMIT (8)."""
    tx = (recs[:, L.REC_SYSFLAG] if rows is None else recs[rows, L.REC_SYSFLAG]) & L.SYSFLAG_TX_MASK
    return (tx == 0) | (tx == L.SYSFLAG_TX_COMMIT)


def tags_codes(u8: np.ndarray, recs: np.ndarray, at: np.ndarray | None = None) -> np.ndarray:
    """Each record's tagsCode before any delay (of the rows ``at``; None: all): the kernel's where it settled
    it, else computed here."""
    tags_code = recs[:, L.REC_TAGS_CODE].copy() if at is None else recs[at, L.REC_TAGS_CODE]
    unknown = np.flatnonzero(tags_code == L.TAGS_CODE_UNKNOWN)
    if len(unknown):
        tags_code[unknown] = _tags_codes(u8, recs[unknown if at is None else at[unknown]])
    return tags_code


def dispatch(buf, seg: Segment, recs: np.ndarray, delays_ms: tuple[int, ...] = DEFAULT_DELAYS_MS,
             light_queues: LightQueues | None = None, batch_topics: frozenset[str] = frozenset(),
             topics: tuple[list[str], np.ndarray] | None = None) -> Dispatched:
    """The entries ``recs`` dispatch to ConsumeQueues (see the module docstring); with ``light_queues``, each
    record's light-queue units follow its own entry (:func:`_with_light_queues`); the records of
    ``batch_topics`` (BatchCQ) make none here (:func:`rocketidx.consumequeue.batch.dispatch_batch`).
    ``topics``: :func:`topics_of` of the same records, where the caller has it already."""
    u8 = np.frombuffer(buf, np.uint8, seg.size)
    keep = entry_mask(recs)
    topics, topic_index = topics if topics is not None else topics_of(u8, recs)
    if batch_topics and batch_topics.intersection(topics):
        keep &= ~np.asarray([t in batch_topics for t in topics], bool)[topic_index]
    # ``at``: the records array's row of each entry (None: every row makes one). The columns an entry needs are
    # gathered one by one: a copy of the kept rows would carry every column of the records array.
    at = None if keep.all() else np.flatnonzero(keep)
    if at is not None:
        topic_index = topic_index[at]

    def col(c: int) -> np.ndarray:
        return recs[:, c] if at is None else recs[at, c]

    tags_code = tags_codes(u8, recs, at)
    store_ts = col(L.REC_STORE_TS)
    if L.SCHEDULE_TOPIC in topics:
        scheduled = topic_index == topics.index(L.SCHEDULE_TOPIC)
        tags_code = _delayed(seg, u8, recs, at, scheduled, store_ts, tags_code, delays_ms)
    out = Dispatched(topics, topic_index, col(L.REC_QUEUE_ID).astype(np.int32), col(L.REC_QUEUE_OFFSET),
                     col(L.REC_PHY).astype(np.int64), col(L.REC_TOTAL).astype(np.int32), tags_code,
                     col(L.REC_POS).astype(np.int64))
    return out if light_queues is None else _with_light_queues(u8, recs, at, out, light_queues)


def _with_light_queues(u8: np.ndarray, recs: np.ndarray, at: np.ndarray | None, d: Dispatched,
                       rules: LightQueues) -> Dispatched:
    """``d`` with the light-queue units of its records (``multiDispatchLmqQueue``), each right after its
    record's own entry, in the names' order, so every queue sees its units in CommitLog order.

    A record of a topic the release dispatches, carrying both ``INNER_MULTI_DISPATCH`` and
    ``INNER_MULTI_QUEUE_OFFSET`` (neither blank), makes one unit per name: the record's offset, size and
    tagsCode, at the queue offset the second list gives for it, in queue ``name``/0 where ``enable_lmq``
    and the name starts with ``%LMQ%``, else ``name``/the record's queue id. Both lists are split as Java's
    ``String.split(",")`` splits (trailing empty items dropped); lists of different lengths make no unit.
    Left out and counted (``left_out``, which the queue writers add to what they dropped): a name holding
    ``/`` (a 5.1.3+ broker skips it, 5.1.2 is not served to check; before, it wrote a nested directory its own
    load never opens) and an offset ``Long.parseLong`` rejects (on which the broker's dispatch throws)."""
    d = _left(d, (("light_queue_name_holds_separator", 0), ("light_queue_offset_not_a_long", 0)))
    wanted = np.asarray([rules.dispatches(t) for t in d.topics], bool)
    rows = np.flatnonzero(wanted[d.topic_index]) if len(d) else np.zeros(0, np.int64)
    rr = rows if at is None else at[rows]  # the same rows of the records array
    may = _may_name_light_queues(u8, recs, rr)
    rows, rr = rows[may], rr[may]
    if not len(rows):
        return d
    parts = []
    if kernel is not None:  # the kernel splits plain lists; what it leaves goes through the reference below
        part, rest = _plain_units(u8, recs, rows, rr)
        parts.append(part)
        rows, rr = rows[rest], rr[rest]
    if len(rows):
        parts.append(_listed_units(u8, recs, rows, rr))
    topics = list(d.topics)
    where = {t: i for i, t in enumerate(topics)}
    for part in parts:
        for t in part.names:
            if t not in where:
                where[t] = len(topics)
                topics.append(t)
    record = np.concatenate([p.record for p in parts])
    name_index = np.concatenate([np.asarray([where[t] for t in p.names], np.int32)[p.name] if p.names
                                 else np.zeros(0, np.int32) for p in parts])
    offset = np.concatenate([p.offset for p in parts])
    throws = np.concatenate([p.throws for p in parts])
    # Per distinct name, then per unit: a name holding '/' is left out, a name starting with %LMQ% goes to queue 0.
    separator = np.asarray(["/" in t for t in topics], bool)[name_index]
    left_out = (("light_queue_name_holds_separator", int(separator.sum())),
                ("light_queue_offset_not_a_long", int((~separator & throws).sum())))
    keep_idx = np.flatnonzero(~separator & ~throws)
    if not len(keep_idx):
        return _left(d, left_out)
    record, name_index = record[keep_idx], name_index[keep_idx]
    lmq = np.asarray([t.startswith(L.LMQ_PREFIX) for t in topics], bool)[name_index] & rules.enable_lmq
    queue_id = np.where(lmq, 0, d.queue_id[record]).astype(np.int32)
    row_at, unit_at, unit = _after_their_records(len(d), record)

    def merged(own: np.ndarray, units: np.ndarray) -> np.ndarray:
        out = np.empty(len(row_at) + len(unit_at), own.dtype)
        out[row_at], out[unit_at] = own, units[unit]
        return out

    return Dispatched(topics, merged(d.topic_index, name_index), merged(d.queue_id, queue_id),
                      merged(d.queue_offset, offset[keep_idx]), merged(d.phy_offset, d.phy_offset[record]),
                      merged(d.size, d.size[record]), merged(d.tags_code, d.tags_code[record]),
                      merged(d.position, d.position[record]), left_out)


class _Units(NamedTuple):
    """Light-queue units, before the rules that leave some out: each unit's row in the entries, its name (an
    index into ``names``, distinct names as Java decodes them), its queue offset, and whether
    ``Long.parseLong`` throws on it; a record's units in its lists' order."""

    record: np.ndarray
    names: list[str]
    name: np.ndarray
    offset: np.ndarray
    throws: np.ndarray


def _plain_units(u8: np.ndarray, recs: np.ndarray, rows: np.ndarray, rr: np.ndarray) -> tuple[_Units, np.ndarray]:
    """The units of the records (``rows``; ``rr`` the same in the records array) whose lists the kernel found
    and are plain (``light_units`` in rocketidx/_native.c: printable ASCII, no empty item, plain numbers), and a
    mask of the rows left for :func:`_listed_units`: those it did not find (the numpy path's) or not plain.
    A record that lacks one of the lists makes no unit on either path."""
    known = recs[rr, L.REC_MULTI_DISPATCH] == 1
    npos, nlen = recs[rr, L.REC_MULTI_NAMES_POS], recs[rr, L.REC_MULTI_NAMES_LEN]
    opos, olen = recs[rr, L.REC_MULTI_OFFSETS_POS], recs[rr, L.REC_MULTI_OFFSETS_LEN]
    asked = np.flatnonzero(known & (npos >= 0) & (opos >= 0))
    count = np.zeros(len(asked), np.int64)
    simple = np.zeros(len(asked), np.uint8)
    cap = int(nlen[asked].sum()) // 2 + len(asked) + 1  # an item is a byte and a comma, but for the last
    unit_name, unit_offset = np.empty(cap, np.int64), np.empty(cap, np.int64)
    first_pos, first_len = np.empty(cap, np.int64), np.empty(cap, np.int64)
    units, names = kernel.light_units(u8, npos[asked], nlen[asked], opos[asked], olen[asked], count, simple,
                                      unit_name, unit_offset, first_pos, first_len) if len(asked) else (0, 0)
    rest = ~known
    rest[asked[simple == 0]] = True
    decoded = decode_java_utf8(binary_array(*gather_ranges(u8, first_pos[:names], first_len[:names]))).to_pylist()
    return _Units(np.repeat(rows[asked], count), decoded, unit_name[:units], unit_offset[:units],
                  np.zeros(units, bool)), rest


def _listed_units(u8: np.ndarray, recs: np.ndarray, rows: np.ndarray, rr: np.ndarray) -> _Units:
    """The units of ``rows`` by Java's rules in full: ``String.split(",")`` of both lists (trailing empty items
    dropped, a blank list none), lists of different lengths none, each offset as ``Long.parseLong`` takes it."""
    import pyarrow.compute as pc
    with_rows, names, offsets = _light_lists(u8, recs, rows, rr)
    if not len(with_rows):
        return _Units(np.zeros(0, np.int64), [], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool))
    names, offsets = _java_split(names), _java_split(offsets)
    n_count = pc.list_value_length(names).to_numpy(zero_copy_only=False)
    o_count = pc.list_value_length(offsets).to_numpy(zero_copy_only=False)
    same = n_count == o_count
    flat_names = pc.list_flatten(names.filter(pa.array(same)))
    parsed, throws = java_parse_longs(pc.list_flatten(offsets.filter(pa.array(same))))
    enc = pc.dictionary_encode(flat_names)
    return _Units(np.repeat(with_rows[same], n_count[same]), enc.dictionary.to_pylist(),
                  enc.indices.to_numpy(zero_copy_only=False), parsed, throws)


def _after_their_records(n: int, record: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where ``n`` rows and their units (``record``: each unit's row) land when each row's units follow it, in
    their order: (each row's place, each placed unit's place, which unit that is). Linear where the units come
    in row order (the kernel's path): places are counted, not sorted."""
    by = np.argsort(record, kind="stable") if len(record) and (np.diff(record) < 0).any() else None
    rec = record if by is None else record[by]
    counts = np.bincount(rec, minlength=n)
    before = np.cumsum(counts) - counts  # units of the rows before each row: also where its own start in rec
    row_at = np.arange(n) + before
    unit_at = row_at[rec] + 1 + (np.arange(len(rec)) - before[rec])
    return row_at, unit_at, (np.arange(len(rec)) if by is None else by)


def _light_lists(u8: np.ndarray, recs: np.ndarray, rows: np.ndarray, rr: np.ndarray
                 ) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """The rows of ``rows`` (``rr``: the same in the records array) whose properties hold both light-queue
    lists, and the two lists' values as Java strings. The kernel found the values while each record was in
    cache (``REC_MULTI_NAMES_POS`` ...); rows it was not asked about (the numpy path) have their properties
    gathered and parsed here, with the same rule."""
    known = recs[rr, L.REC_MULTI_DISPATCH] == 1
    k, kr = rows[known], rr[known]
    both = (recs[kr, L.REC_MULTI_NAMES_POS] >= 0) & (recs[kr, L.REC_MULTI_OFFSETS_POS] >= 0)
    k, kr = k[both], kr[both]
    parts = [(k, property_strings(u8, recs[kr, L.REC_MULTI_NAMES_POS], recs[kr, L.REC_MULTI_NAMES_LEN]),
              property_strings(u8, recs[kr, L.REC_MULTI_OFFSETS_POS], recs[kr, L.REC_MULTI_OFFSETS_LEN]))]
    rest = rows[~known]
    if len(rest):
        sub = recs[rr[~known]]
        data, offs = gather_ranges(u8, sub[:, L.REC_PROPS_POS], np.maximum(sub[:, L.REC_PROPS_LEN], 0))
        found = property_ranges(data, offs, [L.PROPERTY_INNER_MULTI_DISPATCH, L.PROPERTY_INNER_MULTI_QUEUE_OFFSET])
        has_names, n_start, n_len = found[L.PROPERTY_INNER_MULTI_DISPATCH]
        has_offsets, o_start, o_len = found[L.PROPERTY_INNER_MULTI_QUEUE_OFFSET]
        both = np.flatnonzero(has_names & has_offsets)
        parts.append((rest[both], property_strings(data, n_start[both], n_len[both]),
                      property_strings(data, o_start[both], o_len[both])))
    if len(parts) == 1:
        return parts[0]
    return (np.concatenate([p[0] for p in parts]), pa.concat_arrays([p[1] for p in parts]),
            pa.concat_arrays([p[2] for p in parts]))


_NAMES_PROPERTY = re.compile(re.escape(f"{L.PROPERTY_INNER_MULTI_DISPATCH}\x01".encode()))


def _may_name_light_queues(u8: np.ndarray, recs: np.ndarray, rr: np.ndarray) -> np.ndarray:
    """Which records' properties hold ``INNER_MULTI_DISPATCH\x01`` (a superset of those that name light
    queues: :func:`property_ranges` then parses only these). The kernel says it of each record while the
    record is in cache (``REC_MULTI_DISPATCH``); where it was not asked (the numpy path: -1) one C-level search
    of those records' properties decides, without gathering them."""
    flag = recs[rr, L.REC_MULTI_DISPATCH]
    out = flag == 1
    unknown = np.flatnonzero(flag < 0)
    if not len(unknown):
        return out
    start = recs[rr[unknown], L.REC_PROPS_POS].astype(np.int64)
    end = start + np.maximum(recs[rr[unknown], L.REC_PROPS_LEN], 0).astype(np.int64)
    order = np.argsort(start, kind="stable")
    hits = np.fromiter((m.start() for m in _NAMES_PROPERTY.finditer(memoryview(u8), int(start.min()),
                                                                     int(end.max()))), np.int64)
    at = np.searchsorted(start[order], hits, side="right") - 1
    inside = (at >= 0) & (hits < end[order][np.maximum(at, 0)])
    out[unknown[order[at[inside]]]] = True
    return out


def _left(d: Dispatched, left_out: tuple) -> Dispatched:
    """``d`` with ``left_out`` (NamedTuple._replace would take the rows' count, ``len(d)``, for its fields')."""
    return Dispatched(d.topics, d.topic_index, d.queue_id, d.queue_offset, d.phy_offset, d.size, d.tags_code,
                      d.position, left_out)


def property_strings(data: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
    """The byte ranges ``[start, start+length)`` of ``data`` as Java strings."""
    d, o = gather_ranges(data, start, length)
    return decode_java_utf8(binary_array(d, o))


# A trailing comma, or a value that may be blank (empty, or not starting with an ASCII letter, digit or '%':
# a superset of the blank ones, however wide whitespace is): what a plain split could get wrong.
_SPLIT_SPECIAL = r",$|^$|^[^0-9A-Za-z%]"


def _java_split(values: pa.Array) -> pa.ListArray:
    """Java ``value.split(",")`` of each string: trailing empty items dropped (",," splits to no item), a blank
    value (``StringUtils.isBlank``: empty or whitespace) to no item, as it dispatches nothing."""
    import pyarrow.compute as pc
    if not len(values) or not pc.any(pc.match_substring_regex(values, _SPLIT_SPECIAL)).as_py():
        return pc.split_pattern(values, pattern=",")  # no trailing comma, no blank value: a plain split
    trimmed = pc.utf8_rtrim(values, characters=",")
    blank = pc.or_(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0), pc.equal(pc.utf8_length(trimmed), 0))
    split = pc.split_pattern(trimmed, pattern=",")
    empty = pa.array([[]] * len(values), pa.list_(pa.string()))
    return pc.if_else(blank, empty, split)


_PLAIN_LONG = r"^-?[0-9]{1,18}$"  # what Long.parseLong surely takes, and Arrow's cast the same way


def java_parse_longs(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``Long.parseLong`` of each string: (the values, 0 where it throws; a bool mask of where it throws). The
    plain ones are cast at once; any other (a sign '+', 19 digits or more, Unicode digits, not a number at all:
    rare) is judged one by one by :func:`rocketidx.commitlog.javaparse.java_parse_integer`."""
    import pyarrow.compute as pc
    plain = pc.match_substring_regex(values, _PLAIN_LONG)
    if pc.all(plain).as_py() is not False:  # the common case: one cast
        return pc.cast(values, pa.int64()).to_numpy(zero_copy_only=False), np.zeros(len(values), bool)
    plain = plain.to_numpy(zero_copy_only=False)
    out = np.zeros(len(values), np.int64)
    throws = np.ones(len(values), bool)
    idx = np.flatnonzero(plain)
    if len(idx):
        out[idx] = pc.cast(values.take(pa.array(idx)), pa.int64()).to_numpy(zero_copy_only=False)
        throws[idx] = False
    for j in np.flatnonzero(~plain):
        v = java_parse_integer(values[int(j)].as_py() or "", 64)
        if v is not None:
            out[j], throws[j] = v, False
    return out, throws


def parse_longs_at(data: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`java_parse_longs` of the byte ranges ``[start, start+length)`` of ``data``: the kernel reads the
    plain ones (``[+-]?[0-9]{1,18}``) in place, the rest (or all, without it) go through the reference."""
    start, length = np.ascontiguousarray(start, np.int64), np.ascontiguousarray(length, np.int64)
    if kernel is None:
        return java_parse_longs(property_strings(data, start, length))
    values, ok = np.empty(len(start), np.int64), np.empty(len(start), np.uint8)
    kernel.plain_longs(data, start, length, values, ok)
    throws = np.zeros(len(start), bool)
    other = np.flatnonzero(ok == 0)
    if len(other):
        values[other], throws[other] = java_parse_longs(property_strings(data, start[other], length[other]))
    return values, throws


def _tags_codes(u8: np.ndarray, recs: np.ndarray) -> np.ndarray:
    """Java ``String.hashCode`` of each record's TAGS as Java decodes it; few distinct values, each hashed once
    (no TAGS is the empty string here: 0 either way)."""
    tag_values, tag_index = _encoded(u8, recs, L.REC_TAGS_POS, L.REC_TAGS_LEN)
    return java_string_hash(pa.array(tag_values, pa.string())).astype(np.int64)[tag_index]


def topics_of(u8: np.ndarray, recs: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The records' topics, dictionary-encoded. Where the reader grouped them (``REC_TOPIC_KEY``: the kernel
    compares topic bytes while the record is in cache) only one record of each group is decoded here."""
    key = recs[:, L.REC_TOPIC_KEY]
    if not len(key) or key.min() < 0:
        return _encoded(u8, recs, L.REC_TOPIC_POS, L.REC_TOPIC_LEN)
    # A group's key is its first record's REC_POS: those rows are the groups, in REC_POS order, and every row
    # finds its group by binary search (no sort). A key naming a record outside these rows (not one batch of
    # the kernel's) falls back to decoding every topic.
    pos = recs[:, L.REC_POS]
    first = np.flatnonzero(key == pos)
    groups = pos[first]
    inverse = np.searchsorted(groups, key)
    if not len(groups) or inverse.max() >= len(groups) or (groups[inverse] != key).any():
        return _encoded(u8, recs, L.REC_TOPIC_POS, L.REC_TOPIC_LEN)
    topics, index = _encoded(u8, recs[first], L.REC_TOPIC_POS, L.REC_TOPIC_LEN)
    return topics, index[inverse]


_FEW_ROWS = 256


def _java_decoded(raw: bytes) -> str:
    """One value as :func:`rocketidx.commitlog.columns.decode_java_utf8` decodes it (valid UTF-8 as it is)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return java_utf8_decode(raw)


def _encoded(u8: np.ndarray, recs: np.ndarray, pos_col: int, len_col: int) -> tuple[list[str], np.ndarray]:
    """A string field of every record, dictionary-encoded on its raw bytes: (distinct values as Java decodes
    them, each record's index). An absent field is the empty string, which hashes as no TAGS does (0). Two
    byte strings that decode alike (malformed UTF-8 becomes U+FFFD) are one value, as they are one queue
    directory or one tag to the broker."""
    if len(recs) <= _FEW_ROWS:  # a batch's topic groups: a dict, not pyarrow.compute (40 ms to import a process)
        raw = [bytes(u8[p:p + n]) for p, n in zip(recs[:, pos_col].tolist(), np.maximum(recs[:, len_col], 0).tolist())]
        ids: dict[bytes, int] = {}
        index = np.fromiter((ids.setdefault(b, len(ids)) for b in raw), np.int32, len(raw))
        decoded = [_java_decoded(b) for b in ids]
    else:
        import pyarrow.compute as pc
        d, o = gather_ranges(u8, recs[:, pos_col], np.maximum(recs[:, len_col], 0))
        enc = pc.dictionary_encode(binary_array(d, o))
        decoded = decode_java_utf8(enc.dictionary).to_pylist()
        index = numpy_of(enc.indices).astype(np.int32)
    values = list(dict.fromkeys(decoded))
    if len(values) != len(decoded):  # malformed bytes made two raw values one string
        index = np.asarray([values.index(v) for v in decoded], np.int32)[index]
    return values, index


def _delayed(seg: Segment, u8: np.ndarray, recs: np.ndarray, at: np.ndarray | None, scheduled: np.ndarray,
             store_ts: np.ndarray, tags_code: np.ndarray, delays_ms: tuple[int, ...]) -> np.ndarray:
    """tagsCode of the schedule topic's records (``scheduled``, over the entries; ``at``: their rows in
    ``recs``, None: the same): storeTimestamp + the delay of their DELAY level (> 0)."""
    rows = np.flatnonzero(scheduled)
    sub = recs[rows if at is None else at[rows]]
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
