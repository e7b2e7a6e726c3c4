"""Key queries over a build output or a broker's ``store/index`` directory.

In: an index directory (a build output with ``_manifest.json``, its ``index/`` subdirectory, or a bare
directory of IndexFiles) and the sizes. Out: :class:`IndexFile` objects oldest first, and answers with
``IndexService.queryOffset`` semantics (:func:`rocketidx.index.lookup.query_offsets`).
"""
from __future__ import annotations

import os

from rocketidx.index.lookup import query_offsets
from rocketidx.index.reader import IndexFile
import rocketidx.layout as L
from rocketidx.output.open import open_index_dir
import rocketidx.storage as storage


def open_index(path: str | os.PathLike, hash_slot_num: int | None = None, index_num: int | None = None
               ) -> list[IndexFile]:
    """The index files under ``path``, oldest first, each checked (size and header).

    Which files, and with which sizes: :func:`rocketidx.output.open.open_index_dir`, which pins a build
    output's version once. Files once open stay readable whatever a build does next (the commit only
    unlinks them); a version removed between the pinning and the opening (a build committed in that
    instant) is pinned again, so the answer comes from the previous output or the new one, never both.
    """
    for attempt in range(READ_ATTEMPTS):
        d = open_index_dir(path, hash_slot_num, index_num)
        try:
            return d.open()
        except FileNotFoundError:
            if d.manifest is None or attempt == READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


READ_ATTEMPTS = 5


__all__ = ["open_index", "query_offsets", "query_offsets_exact", "read_messages_at"]


def read_messages_at(commitlog, offsets: list[int], *, check_crc: bool = True):
    """The messages starting at the given absolute CommitLog offsets (a pyarrow Table in that order,
    with a ``body_preview`` column); an offset where no valid message starts becomes a null row."""
    import bisect

    import pyarrow as pa

    from rocketidx.commitlog.columns import MESSAGE_SCHEMA
    from rocketidx.commitlog.segments import Segment, list_segments
    segments = list_segments(commitlog)
    bases = [s.base_offset for s in segments]
    rows, previews = [], []
    opened: dict[str, storage.RangeFile] = {}
    try:
        for off in offsets:
            row, preview = None, None
            i = bisect.bisect_right(bases, off) - 1
            if i >= 0 and off < segments[i].end_offset:
                seg = segments[i]
                f = opened.get(seg.path) or opened.setdefault(seg.path, storage.RangeFile(seg.path))
                row, preview = _message_at(f, seg, off - seg.base_offset, check_crc, Segment)
            rows.append(row)
            previews.append(preview)
    finally:
        for f in opened.values():
            f.close()
    empty = {f.name: None for f in MESSAGE_SCHEMA}
    table = pa.Table.from_pylist([r or empty for r in rows], MESSAGE_SCHEMA)
    return table.append_column("body_preview", pa.array(previews, pa.string())), [r is not None for r in rows]


def _message_at(f, seg, pos: int, check_crc: bool, Segment):
    """The message starting ``pos`` bytes into segment ``seg`` (open as ``f``) and its body preview, or
    (None, None): two ranged reads, its TOTALSIZE and then the record, so that a remote CommitLog
    costs a message's bytes, not a segment's."""
    import numpy as np

    from rocketidx.layout import REC_BODY_LEN, REC_BODY_POS
    from rocketidx.commitlog.records import check_records
    from rocketidx.commitlog.columns import records_to_batch
    if seg.size - pos < L.MIN_RECORD_SIZE:
        return None, None
    total = int.from_bytes(f.read_at(4, pos), "big", signed=True)
    if not L.MIN_RECORD_SIZE <= total <= seg.size - pos:
        return None, None
    buf = f.read_at(total, pos)
    one = Segment(seg.path, seg.base_offset + pos, len(buf))  # the record alone, at its own offset
    recs, _ = check_records(buf, one, np.array([0], np.int64), check_crc=check_crc)
    if not len(recs):
        return None, None
    row = records_to_batch(buf, one, recs).to_pylist()[0]
    row["segment_offset"] = pos  # ``one`` starts at the record: its own offsets are 0, the segment's are not
    body = bytes(buf[recs[0, REC_BODY_POS]:recs[0, REC_BODY_POS] + min(64, recs[0, REC_BODY_LEN])])
    return row, _preview(body, bool(row["sys_flag"] & L.SYSFLAG_COMPRESSED))


def message_has_key(row: dict, topic: str, key: str) -> bool:
    """Whether the message makes the index entry ``topic#key`` (rollbacks make none)."""
    if row is None or row["topic"] != topic or (row["sys_flag"] & L.SYSFLAG_TX_MASK) == L.SYSFLAG_TX_ROLLBACK:
        return False
    if row["uniq_key"] == key:
        return True
    return key != "" and key in (row["keys"] or "").split(L.KEY_SEPARATOR)


def message_has_tag(row: dict, topic: str, tag: str) -> bool:
    """Whether the message makes the tag entry ``topic#T#tag`` of a 5.4+ broker: its TAGS is ``tag`` whole."""
    if row is None or row["topic"] != topic or (row["sys_flag"] & L.SYSFLAG_TX_MASK) == L.SYSFLAG_TX_ROLLBACK:
        return False
    return bool(tag) and row["tags"] == tag


def _preview(body: bytes, compressed: bool) -> str:
    """Text when the body's first bytes are printable UTF-8, else hex: a terminal-safe glimpse."""
    if compressed:
        return "zlib: " + body[:32].hex()
    try:
        text = body.decode("utf-8")
        if text.isprintable():
            return text
    except UnicodeDecodeError:
        pass
    return "hex: " + body[:32].hex()


def query_offsets_exact(files: list[IndexFile], commitlog, topic: str, key: str, begin: int = 0,
                        end: int = 2**63 - 1, max_num: int = L.DEFAULT_MAX_MSGS_NUM_BATCH) -> list[int]:
    """:func:`query_offsets`, then only the offsets whose message makes the entry ``topic#key``.

    The broker leaves keys with equal hashes to the client; this is that client-side check, done
    against the CommitLog (like the broker, it filters after taking at most ``max_num`` offsets).
    """
    offsets = query_offsets(files, topic, key, begin, end, max_num)
    table, _ = read_messages_at(commitlog, offsets)
    return [o for o, row in zip(offsets, table.to_pylist())
            if message_has_key(row if row["topic"] is not None else None, topic, key)]
