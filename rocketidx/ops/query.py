"""Lookups: :func:`query` takes a :class:`rocketidx.config.QueryRequest` and yields one answer per lookup;
:func:`query_key` and :func:`query_queue` are the library's forms (``rocketidx.query_key``, ``query_queue``).

In: an index and key (or tag) lookups, as the broker's ``queryMsgByKey`` answers them, or ConsumeQueues and
slot lookups, as a restarted broker's ``ConsumeQueue.get`` does. Out: per key lookup the offsets, newest
first (with ``exact``, only those whose message carries the key; with ``show``, the messages); per slot the
entry ``(phy_offset, size, tags_code)`` or None.

Stays true: answers come one at a time, in the lookups' order, so a caller can print each as it comes; the
index or queues are opened (and an index without files refused) before the first answer.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterator

from rocketidx.commitlog.entries import index_rules
from rocketidx.config import MAX_MSGS_NUM_BATCH, QueryRequest
from rocketidx.errors import RocketIdxError, StoreLayoutError
import rocketidx.layout as L
import rocketidx.storage as storage

__all__ = ["QueryRequest", "KeyAnswer", "SlotAnswer", "query", "query_key", "query_queue"]


@dataclass(frozen=True)
class KeyAnswer:
    """One key or tag lookup: as asked (``lookup``), the index key it looked up, the cap its answer used (``max_num``, at most the
    broker's 64), the offsets, and with ``show``/``exact`` the messages at them (a pyarrow Table)."""

    lookup: dict
    key: str  # what was looked up: the key, or a tag's T#TAGS
    max_num: int
    offsets: list[int]
    messages: object = None


@dataclass(frozen=True)
class SlotAnswer:
    """One queue slot lookup and the broker's entry there (None: it has none); with ``show``, the message it
    points at (None: no CommitLog to read it from, or no entry)."""

    topic: str
    queue_id: int
    queue_offset: int
    entry: tuple[int, int, int] | None
    messages: object = None
    commitlog: str | None = None


def query(request: QueryRequest) -> Iterator[KeyAnswer] | Iterator[SlotAnswer]:
    """The answers to ``request``'s lookups, one at a time (the index or queues are opened first, here), under
    the broker release's index rules while they are asked for."""
    with index_rules(request.release.tag_entries):
        yield from _slots(request) if request.consumequeue else _keys(request)


def _keys(r: QueryRequest) -> Iterator[KeyAnswer]:
    from rocketidx.query.lookup import open_index
    files = open_index(r.index, r.hash_slot_num, r.index_num)
    if not files:
        raise StoreLayoutError(storage.redact(r.index), "no IndexFiles found")
    return (_answer(r, files, q) for q in r.lookups)


def _answer(r: QueryRequest, files, q) -> KeyAnswer:
    import pyarrow as pa

    from rocketidx.query.lookup import message_has_key, message_has_tag, query_offsets, read_messages_at
    max_num = min(q["maxNum"], MAX_MSGS_NUM_BATCH)  # the cap the answer used, which it echoes
    # A tag entry's key is topic#T#TAGS (5.4.0 on): the lookup of "T#TAGS" as a key finds it, and the
    # exact check is the admin client's for a tag query, TAGS equal as a whole (5.5.0 MQAdminImpl:472).
    tag = q.get("tag")
    key = q["key"] if tag is None else f"{L.INDEX_TAG_TYPE}#{tag}"
    offsets = query_offsets(files, q["topic"], key, q["begin"], q["end"], max_num)
    table = None
    if r.show or r.exact:
        table, _ = read_messages_at(r.commitlog, offsets)
        if r.exact:
            rows = table.to_pylist()
            keep = [i for i, m in enumerate(rows) if (message_has_key(
                m if m["topic"] is not None else None, q["topic"], key) if tag is None
                else message_has_tag(m if m["topic"] is not None else None, q["topic"], tag))]
            offsets = [offsets[i] for i in keep]
            table = table.take(pa.array(keep, pa.int64()))
    return KeyAnswer(dict(q), key, max_num, offsets, table)


def _slots(r: QueryRequest) -> Iterator[SlotAnswer]:
    from rocketidx.output.open import open_consumequeues
    queues = open_consumequeues(r.consumequeue, r.commitlog)
    lookups = _queue_lookups(r.queue_lookups_file) if r.queue_lookups_file else [r.queue_lookup]
    commitlog = r.commitlog or _store_commitlog(r.consumequeue)
    return (_slot(r, queues, commitlog, *lookup) for lookup in lookups)


def _slot(r: QueryRequest, queues, commitlog: str | None, topic: str, qid: int, offset: int) -> SlotAnswer:
    got = queues.get(topic, qid, offset)
    table = None
    if r.show and got is not None and commitlog is not None:
        from rocketidx.query.lookup import read_messages_at
        table, _ = read_messages_at(commitlog, [got[0]])
    return SlotAnswer(topic, qid, offset, got, table, commitlog)


def _queue_lookups(path: str) -> list[tuple[str, int, int]]:
    """A file of JSON lines with topic, queueId and queueOffset; a line that is not one is an error naming it."""
    lookups = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    q = json.loads(line)
                    lookups.append((str(q["topic"]), int(q["queueId"]), int(q["queueOffset"])))
                except (ValueError, KeyError, TypeError) as e:
                    raise RocketIdxError(f"{path} line {n}: not a lookup with topic, queueId and "
                                         f"queueOffset: {e}") from e
    return lookups


def _store_commitlog(path: str) -> str | None:
    """The CommitLog beside a broker store's consumequeue, or the one a build output was built from."""
    from rocketidx.output.target import open_manifest
    if os.path.isdir(os.path.join(path, "commitlog")):
        return os.path.join(path, "commitlog")
    m = open_manifest(path) if os.path.isdir(path) else None
    return m.header.get("commitlog") if m is not None else None


def query_key(index, topic: str, key: str, *, begin: int = 0, end: int = 2**63 - 1, max_num: int | None = None,
              commitlog: str | os.PathLike | None = None, hash_slot_num: int | None = None,
              index_num: int | None = None) -> list[int]:
    """The CommitLog offsets a broker's ``queryMsgByKey`` finds for ``key`` of ``topic`` (its
    ``IndexService.queryOffset``): newest first, at most ``max_num`` (by default and at most the broker's
    ``maxMsgsNumBatch``, 64), stored between ``begin`` and ``end`` (epoch ms).

    ``index``: what :func:`open_index` opens (a build output, its ``index/``, a broker's ``store/index``; a
    path or a URI) or the list it returned. Keys with equal hashes come back too, as from the broker; with
    ``commitlog``, offsets whose message does not carry the key are dropped (``query --exact``).
    """
    from rocketidx.query.lookup import open_index, query_offsets, query_offsets_exact
    max_num = MAX_MSGS_NUM_BATCH if max_num is None else max_num
    files = open_index(index, hash_slot_num, index_num) if isinstance(index, (str, os.PathLike)) else index
    if commitlog is None:
        return query_offsets(files, topic, key, begin, end, max_num)
    return query_offsets_exact(files, commitlog, topic, key, begin, end, max_num)


def query_queue(queues, topic: str, queue_id: int, queue_offset: int, *,
                commitlog: str | os.PathLike | None = None) -> tuple[int, int, int] | None:
    """A restarted broker's ``ConsumeQueue.get(queueOffset)``: the slot's ``(phy_offset, size, tags_code)``,
    or None where the broker has no entry (below the queue's minimum, past its end, no such queue).

    ``queues``: what :func:`open_consumequeues` returned, or what it opens (a build output with ConsumeQueues,
    a broker store, or a bare ``consumequeue`` directory with ``commitlog``, whose first offset decides the
    queues' minimum).
    """
    if isinstance(queues, (str, os.PathLike)):
        from rocketidx.output.open import open_consumequeues
        queues = open_consumequeues(queues, commitlog)
    return queues.get(topic, queue_id, queue_offset)
