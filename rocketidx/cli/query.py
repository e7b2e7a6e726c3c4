"""``rocketidx query``: keys looked up as the broker's queryMsgByKey does, and the messages shown."""
from __future__ import annotations

import json
import sys

from rocketidx.errors import RocketIdxError, StoreLayoutError
import rocketidx.layout as L
from rocketidx.cli.common import add_broker_conf, add_broker_version, apply_broker_conf
import rocketidx.storage as storage
from rocketidx.units import HASH_SLOTS_HELP, INDEX_NUM_HELP, count_arg, time_arg


def cmd_query(a) -> int:
    apply_broker_conf(a)
    if a.consumequeue:
        return _query_queues(a)
    import pyarrow as pa

    from rocketidx.commitlog.entries import tag_entries_on
    from rocketidx.query.lookup import message_has_key, message_has_tag, open_index, query_offsets, read_messages_at
    if not (a.index or a.store):
        print("rocketidx query: give --index DIR or --store STORE", file=sys.stderr)
        return 2
    clash = next((why for bad, why in (
        (a.index and a.store, "--index and --store name two indexes: give one"),
        (a.queries and (a.topic or a.key or a.tag), "--topic/--key/--tag and --queries exclude each other"),
        (a.key and a.tag, "--key and --tag exclude each other: one lookup each"),
        (not a.queries and not (a.topic and (a.key or a.tag)), "give --topic T --key K, or --queries FILE"),
        (a.max < 1, f"--max must be at least 1, got {a.max}")) if bad), None)
    if clash:
        print(f"rocketidx query: {clash}", file=sys.stderr)
        return 2
    index = a.index or storage.join(a.store, "index")
    commitlog = a.commitlog or (storage.join(a.store, "commitlog") if a.store else None)
    if (a.show or a.exact) and commitlog is None:
        print("rocketidx query: --show/--exact need the CommitLog: --store STORE or --commitlog DIR", file=sys.stderr)
        return 2
    # Every line is checked before the index is opened: a bad line 900 is not found after 899 answers.
    queries = read_key_queries(a.queries, a) if a.queries else [
        {"topic": a.topic, "key": a.key, "begin": a.begin, "end": a.end, "maxNum": a.max} if a.tag is None else
        {"topic": a.topic, "tag": a.tag, "begin": a.begin, "end": a.end, "maxNum": a.max}]
    if any("tag" in q for q in queries) and not tag_entries_on():
        print("rocketidx query: a tag lookup reads the tag entries a 5.4+ broker's index holds: give "
              "--broker-version (5.4.0 or later)", file=sys.stderr)
        return 2
    files = open_index(index, a.hash_slots, a.index_num)
    if not files:
        raise StoreLayoutError(storage.redact(index), "no IndexFiles found")
    for q in queries:
        begin, end = q["begin"], q["end"]
        max_num = min(q["maxNum"], L.DEFAULT_MAX_MSGS_NUM_BATCH)  # echo the cap the answer used
        # A tag entry's key is topic#T#TAGS (5.4.0 on): the lookup of "T#TAGS" as a key finds it, and the
        # exact check is the admin client's for a tag query, TAGS equal as a whole (5.5.0 MQAdminImpl:472).
        tag = q.get("tag")
        key = q["key"] if tag is None else f"{L.INDEX_TAG_TYPE}#{tag}"
        offsets = query_offsets(files, q["topic"], key, begin, end, max_num)
        table = None
        if a.show or a.exact:
            table, _ = read_messages_at(commitlog, offsets)
            if a.exact:
                rows = table.to_pylist()
                keep = [i for i, r in enumerate(rows) if (message_has_key(
                    r if r["topic"] is not None else None, q["topic"], key) if tag is None
                    else message_has_tag(r if r["topic"] is not None else None, q["topic"], tag))]
                offsets = [offsets[i] for i in keep]
                table = table.take(pa.array(keep, pa.int64()))
        if a.show:
            print_messages(q, table, as_json=a.json)
        else:
            what = {"key": q["key"]} if tag is None else {"tag": tag}
            print(json.dumps({"topic": q["topic"], **what, "begin": begin, "end": end, "maxNum": max_num,
                              "offsets": offsets}, ensure_ascii=False))
    return 0


def read_key_queries(path: str, a) -> list[dict]:
    """``--queries FILE``: one JSON object per line with ``topic`` and ``key`` (strings) and optional
    ``begin``, ``end`` (spelled as the flags are: epoch ms or ISO-8601) and ``maxNum``; the flags give what a
    line leaves out. A line that is not such an object is a :class:`RocketIdxError` naming the file and line."""
    from rocketidx.units import parse_count, parse_time_ms
    queries = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path} line {n}"
            try:
                q = json.loads(line)
            except ValueError as e:
                raise RocketIdxError(f"{where}: not JSON: {e}") from e
            what = "tag" if isinstance(q, dict) and "tag" in q and "key" not in q else "key"
            if not isinstance(q, dict) or not all(isinstance(q.get(k), str) for k in ("topic", what)):
                raise RocketIdxError(f"{where}: not a lookup: expected an object with string topic and key (or tag) "
                                     f"(and optional begin, end, maxNum), got {line.strip()[:80]}")
            # A line's times are spelled as the flags' are (units.parse_time_ms), ISO-8601 included.
            queries.append({"topic": q["topic"], what: q[what],
                            "begin": parse_time_ms(q.get("begin", a.begin), f"{where}: begin"),
                            "end": parse_time_ms(q.get("end", a.end), f"{where}: end"),
                            "maxNum": parse_count(q.get("maxNum", a.max), f"{where}: maxNum", minimum=1)})
    return queries


def _host(addr, port) -> str:
    import ipaddress
    if addr is None:
        return ""
    ip = ipaddress.ip_address(addr)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def print_messages(q: dict, table, *, as_json: bool) -> None:
    from functools import partial
    from rocketidx.units import format_utc
    rows = table.to_pylist()
    if as_json:
        for r in rows:
            r = dict(r)
            r["born_host"] = _host(r.pop("born_host"), r.pop("born_port"))
            r["store_host"] = _host(r.pop("store_host"), r.pop("store_port"))
            print(json.dumps(r, ensure_ascii=False, default=str))
        return
    what = q["key"] if "key" in q else f"{L.INDEX_TAG_TYPE}#{q['tag']}"
    print(f"{q['topic']}#{what}: {len(rows)} message(s)")
    if not rows:
        return
    iso = partial(format_utc, iso=True)
    for r in rows:
        if r["topic"] is None:
            print("  (no valid message at this offset)")
            continue
        print(f"  offset {r['phy_offset']}  topic {r['topic']}  queue {r['queue_id']}@{r['queue_offset']}  "
              f"stored {iso(r['store_timestamp_ms'])}  born {iso(r['born_timestamp_ms'])}")
        print(f"    hosts born {_host(r['born_host'], r['born_port'])} store {_host(r['store_host'], r['store_port'])}"
              f"  sys_flag 0x{r['sys_flag']:X}  reconsume {r['reconsume_times']}")
        print(f"    keys {r['keys']!r}  uniq_key {r['uniq_key']!r}  tags {r['tags']!r}  body {r['body_length']} B: "
              f"{r['body_preview']!r}")
        props = (r["properties"] or "").replace("\x01", "=").replace("\x02", "; ")
        print(f"    properties {props}")


def add_parser(sub) -> None:
    q = sub.add_parser("query", help="look keys up like queryMsgByKey: offsets, newest first",
                       description="Look keys up as the broker's queryMsgByKey does: the CommitLog offsets of the "
                                   "messages whose key hashes match, newest first, hash collisions included (--exact "
                                   "drops them); --show decodes the messages. One JSON line per key.")
    q.add_argument("--index", help="build output, or a directory of IndexFiles (store/index); a path or a URI")
    q.add_argument("--store", help="a broker store: its index/ answers, its commitlog/ backs --show/--exact")
    q.add_argument("--commitlog", help="CommitLog for --show/--exact when --index is given")
    q.add_argument("--show", action="store_true", help="decode the messages found (a table; JSON lines with --json)")
    q.add_argument("--exact", action="store_true",
                   help="drop offsets whose message does not carry the key (hash collisions)")
    q.add_argument("--json", action="store_true", help="with --show: one JSON object per message")
    q.add_argument("--topic", help="topic of the key to look up (with --key)")
    q.add_argument("--key", help="message key (a KEYS word or the UNIQ_KEY message id) to look up (with --topic)")
    q.add_argument("--tag", help="a tag to look up (with --topic), as a 5.4+ broker's admin queryMessage of index "
                                 "type T does: needs --broker-version 5.4 or later; with --exact, messages whose "
                                 "TAGS is this tag as a whole")
    q.add_argument("--queries", help="JSON lines with topic, key (or tag) and optional begin, end, maxNum")
    q.add_argument("--begin", type=time_arg("--begin"), default=0,
                   help="earliest store time, epoch ms or ISO-8601 (default 0)")
    q.add_argument("--end", type=time_arg("--end"), default=2**63 - 1,
                   help="latest store time, epoch ms or ISO-8601 (default: no end)")
    q.add_argument("--max", type=int, default=L.DEFAULT_MAX_MSGS_NUM_BATCH,
                   help=f"most offsets per key (default {L.DEFAULT_MAX_MSGS_NUM_BATCH}; larger values are capped at "
                        f"{L.DEFAULT_MAX_MSGS_NUM_BATCH}, as the broker caps them, and the answer's maxNum says so)")
    q.add_argument("--hash-slots", type=count_arg("--hash-slots", 1), default=None, help=HASH_SLOTS_HELP)
    q.add_argument("--index-num", type=count_arg("--index-num", 1), default=None, help=INDEX_NUM_HELP)
    add_broker_conf(q)
    add_broker_version(q)
    q.add_argument("--consumequeue", help="look a queue slot up instead of a key, as a restarted broker's "
                                          "ConsumeQueue.get does: a build output, a broker store, or a consumequeue "
                                          "directory (then --commitlog too)")
    q.add_argument("--queue-id", type=int, default=None, help="with --consumequeue: the queue (with --topic)")
    q.add_argument("--queue-offset", type=int, default=None,
                   help="with --consumequeue: the slot (a consume offset) to read (with --topic, --queue-id)")


def _query_queues(a) -> int:
    """``query --consumequeue``: one JSON line per lookup, in input order, with the broker's answer (or null)."""
    from rocketidx.output.open import open_consumequeues
    clash = next((why for bad, why in (
        (a.index or a.store, "--consumequeue looks queues up; --index/--store look keys up: give one"),
        (a.key, "--key looks a key up; with --consumequeue give --queue-id and --queue-offset"),
        (a.queries and (a.topic or a.queue_id is not None or a.queue_offset is not None),
         "--topic/--queue-id/--queue-offset and --queries exclude each other"),
        (not a.queries and (a.topic is None or a.queue_id is None or a.queue_offset is None),
         "give --topic T --queue-id Q --queue-offset N, or --queries FILE")) if bad), None)
    if clash:
        print(f"rocketidx query: {clash}", file=sys.stderr)
        return 2
    queues = open_consumequeues(a.consumequeue, a.commitlog)
    if a.queries:
        lookups = []
        with open(a.queries) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        q = json.loads(line)
                        lookups.append((str(q["topic"]), int(q["queueId"]), int(q["queueOffset"])))
                    except (ValueError, KeyError, TypeError) as e:
                        raise RocketIdxError(f"{a.queries} line {n}: not a lookup with topic, queueId and "
                                             f"queueOffset: {e}") from e
    else:
        lookups = [(a.topic, a.queue_id, a.queue_offset)]
    commitlog = a.commitlog or _store_commitlog(a.consumequeue)
    for topic, qid, offset in lookups:
        got = queues.get(topic, qid, offset)
        answer = None if got is None else {"phyOffset": got[0], "size": got[1], "tagsCode": got[2]}
        if a.show and got is not None:
            if commitlog is None:
                print("rocketidx query: --show needs the CommitLog: --commitlog DIR", file=sys.stderr)
                return 2
            from rocketidx.query.lookup import read_messages_at
            table, _ = read_messages_at(commitlog, [got[0]])
            print_messages({"topic": topic, "key": f"queue {qid} offset {offset}"}, table, as_json=a.json)
            continue
        print(json.dumps({"topic": topic, "queueId": qid, "queueOffset": offset, "answer": answer},
                         ensure_ascii=False))
    return 0


def _store_commitlog(path: str) -> str | None:
    """The CommitLog beside a broker store's consumequeue, or the one a build output was built from."""
    import os
    from rocketidx.output.target import open_manifest
    if os.path.isdir(os.path.join(path, "commitlog")):
        return os.path.join(path, "commitlog")
    m = open_manifest(path) if os.path.isdir(path) else None
    return m.header.get("commitlog") if m is not None else None
