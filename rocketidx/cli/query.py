"""``rocketidx query``: flags -> a :class:`rocketidx.config.QueryRequest` -> :func:`rocketidx.ops.query.query`
(keys looked up as the broker's queryMsgByKey does, or queue slots as ConsumeQueue.get) -> one line per
answer, or the messages shown."""
from __future__ import annotations

import json
import sys

from rocketidx.cli.common import add_broker_conf, add_broker_version
from rocketidx.errors import RocketIdxError
from rocketidx.config import MAX_MSGS_NUM_BATCH
from rocketidx.units import HASH_SLOTS_HELP, INDEX_NUM_HELP, count_arg, time_arg


def cmd_query(a) -> int:
    from dataclasses import replace

    from rocketidx.config import query_request
    from rocketidx.ops.query import query
    request = query_request(index=a.index, store=a.store, commitlog=a.commitlog, show=a.show, exact=a.exact,
                            broker_conf=a.broker_conf, broker_version=a.broker_version, hash_slot_num=a.hash_slots,
                            index_num=a.index_num, consumequeue=a.consumequeue,
                            queue_lookup=(a.topic, a.queue_id, a.queue_offset), queue_lookups_file=a.queries)
    if a.consumequeue:
        return _query_queues(a, request)
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
    if (a.show or a.exact) and request.commitlog is None:
        print("rocketidx query: --show/--exact need the CommitLog: --store STORE or --commitlog DIR", file=sys.stderr)
        return 2
    # Every line is checked before the index is opened: a bad line 900 is not found after 899 answers.
    request = replace(request, lookups=tuple(read_key_queries(a.queries, a) if a.queries else [
        {"topic": a.topic, "key": a.key, "begin": a.begin, "end": a.end, "maxNum": a.max} if a.tag is None else
        {"topic": a.topic, "tag": a.tag, "begin": a.begin, "end": a.end, "maxNum": a.max}]))
    if any("tag" in q for q in request.lookups) and not request.release.tag_entries:
        print("rocketidx query: a tag lookup reads the tag entries a 5.4+ broker's index holds: give "
              "--broker-version (5.4.0 or later)", file=sys.stderr)
        return 2
    for answer in query(request):
        q = answer.lookup
        if a.show:
            print_messages({**q, "key": answer.key}, answer.messages, as_json=a.json)
        else:
            what = {"key": q["key"]} if q.get("tag") is None else {"tag": q["tag"]}
            print(json.dumps({"topic": q["topic"], **what, "begin": q["begin"], "end": q["end"],
                              "maxNum": answer.max_num, "offsets": answer.offsets}, ensure_ascii=False))
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
    what = q["key"]
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
    q.add_argument("--max", type=int, default=MAX_MSGS_NUM_BATCH,
                   help=f"most offsets per key (default {MAX_MSGS_NUM_BATCH}; larger values are capped at "
                        f"{MAX_MSGS_NUM_BATCH}, as the broker caps them, and the answer's maxNum says so)")
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


def _query_queues(a, request) -> int:
    """``query --consumequeue``: one JSON line per lookup, in input order, with the broker's answer (or null)."""
    from rocketidx.ops.query import query
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
    for answer in query(request):
        if a.show and answer.entry is not None:
            if answer.commitlog is None:
                print("rocketidx query: --show needs the CommitLog: --commitlog DIR", file=sys.stderr)
                return 2
            print_messages({"topic": answer.topic, "key": f"queue {answer.queue_id} offset {answer.queue_offset}"},
                           answer.messages, as_json=a.json)
            continue
        got = answer.entry
        print(json.dumps({"topic": answer.topic, "queueId": answer.queue_id, "queueOffset": answer.queue_offset,
                          "answer": None if got is None else {"phyOffset": got[0], "size": got[1],
                                                              "tagsCode": got[2]}}, ensure_ascii=False))
    return 0
