"""Sample store generator: a seed -> a valid broker store (``commitlog/`` segments).

Out: ``STORE/commitlog/<20-digit base offset>`` segments of ``segment_bytes`` each, records laid out as
``DefaultAppendMessageCallback.doAppend`` lays them out: a record that does not fit ends the segment
with an 8-byte blank record and goes to the next one; the rest of every segment is zero (the files are
created at full size, sparse).
Stays true: the same :class:`GenConfig` gives the same bytes; every record is valid (body CRC, lengths,
PHYSICALOFFSET = its own offset), so a full build indexes every message.

The message shape follows the brief's yardstick store: a UNIQ_KEY on (nearly) every message, 1 to
``keys_per_message`` KEYS drawn so some keys repeat, a few tags, store times spread over ``span_ms``,
and a small share of v2 records (long retry topics), IPv6 hosts and transaction messages.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from rocketidx.errors import ConfigError, StoreLayoutError
import rocketidx.layout as L


@dataclass(frozen=True)
class GenConfig:
    messages: int
    segment_bytes: int = 64 * 1024**2
    body_bytes: int = 300
    topics: int = 4
    queues: int = 8  # queues per topic (QUEUEID 0..queues-1)
    keys_per_message: int = 2
    span_ms: int = 24 * 3_600_000
    start_ms: int = 1_700_000_000_000
    seed: int = 1
    share_uniq: float = 0.98
    share_v2: float = 0.02
    share_ipv6: float = 0.03
    share_tx: float = 0.03  # split evenly into prepared, commit and rollback
    distinct_keys: int = 0  # 0: about messages / 2, so many keys repeat
    # A broker clock stepping back: at ``clock_steps`` evenly spaced places, a run of messages (1/20 of
    # the messages between two places) is stamped ``clock_back_ms`` earlier, as after an NTP step.
    clock_steps: int = 0
    clock_back_ms: int = 0
    # Light queues: this share of the messages names 1 to 3 of ``lmq_queues`` light queues (%LMQ%L0, ...) in
    # INNER_MULTI_DISPATCH, with the offsets a broker with enableLmq assigns in INNER_MULTI_QUEUE_OFFSET.
    share_lmq: float = 0.0
    lmq_queues: int = 10
    # Batch consume queues: this share of the messages are inner batches of 2 to 16 messages on the BatchCQ
    # topic ``BatchTopic`` (INNER_NUM, INNER_BASE; queue offsets advance by the batch's size), which a
    # config/topics.json beside commitlog/ marks queue.type=BatchCQ.
    share_batch: float = 0.0

    def __post_init__(self) -> None:
        if self.segment_bytes < 4096:
            raise ConfigError("segment_bytes", self.segment_bytes, "must be at least 4096")
        if self.topics < 1:  # was taken as 1 without a word
            raise ConfigError("topics", self.topics, "must be at least 1")
        if self.queues < 1:
            raise ConfigError("queues", self.queues, "must be at least 1")
        if self.clock_steps < 0 or self.clock_back_ms < 0:
            raise ConfigError("clock_steps", (self.clock_steps, self.clock_back_ms), "must not be negative")
        if not 0.0 <= self.share_batch <= 1.0:
            raise ConfigError("share_batch", self.share_batch, "a share from 0 to 1 of the messages")
        if not 0.0 <= self.share_lmq <= 1.0 or self.lmq_queues < 1:
            raise ConfigError("share_lmq", (self.share_lmq, self.lmq_queues),
                              "a share from 0 to 1 of the messages, over at least one light queue")


_BLANK = struct.Struct(">iI")
BATCH_TOPIC = b"BatchTopic"  # the BatchCQ topic of a store made with share_batch
INNER_BATCH_FLAGS = 0x40 | 0x80  # MessageSysFlag.NEED_UNWRAP_FLAG | INNER_BATCH_FLAG
# What the generator's bytes are, beyond its settings: 2 = queue offsets counted per (topic, queue) as a broker
# counts them (transaction halves and rollbacks take none). A cached store of another format is stale.
GEN_FORMAT = 2


def same_store(marker: Path, cfg: GenConfig) -> bool:
    """Whether ``generator.json`` says its store is what ``cfg`` makes today (settings and format alike)."""
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    stored = dict(info.get("config") or {})
    for f in fields(GenConfig):  # a setting added since the store was written, at its default, is what it made
        if f.name not in stored and getattr(cfg, f.name) == f.default:
            stored[f.name] = f.default
    return info.get("format") == GEN_FORMAT and stored == asdict(cfg)


def _topics(cfg: GenConfig) -> list[bytes]:
    names = [f"Topic{i}" for i in range(cfg.topics)]
    return [n.encode() for n in names]


def foreign_files(out: str | os.PathLike) -> list[str]:
    """What in ``out`` the generator did not write: anything but ``generator.json`` and ``commitlog/``
    segments, and any segment at all when there is no ``generator.json`` (a broker's CommitLog)."""
    root = Path(out)
    if not root.exists():
        return []
    if not root.is_dir():
        return [str(root)]
    ours = (root / "generator.json").is_file()
    found = []
    for p in sorted(root.iterdir()):
        if p.name == "generator.json" and p.is_file():
            continue
        if ours and p.name == "config" and p.is_dir() and [q.name for q in p.iterdir()] == ["topics.json"]:
            continue  # the topic table a store with batch records holds
        if p.name == "commitlog" and p.is_dir():
            found += [str(q) for q in sorted(p.iterdir()) if not (ours and q.is_file() and len(q.name) == 20
                                                                 and q.name.isdigit())]
            continue
        found.append(str(p))
    return found


def _light_queue_properties(picked, offsets: dict[str, int], counts: bool) -> str:
    """INNER_MULTI_DISPATCH and INNER_MULTI_QUEUE_OFFSET for the light queues ``picked`` (indexes; each name
    once), with each queue's next offset, as a broker with enableLmq writes them; ``counts``: the record
    enters the queues (a prepared or rolled-back transaction record takes no offset)."""
    names = [f"{L.LMQ_PREFIX}L{int(j)}" for j in dict.fromkeys(int(j) for j in picked)]
    values = [offsets.get(name, 0) for name in names]
    if counts:
        for name, v in zip(names, values):
            offsets[name] = v + 1
    return (f"{L.PROPERTY_INNER_MULTI_DISPATCH}\x01{','.join(names)}\x02"
            f"{L.PROPERTY_INNER_MULTI_QUEUE_OFFSET}\x01{','.join(map(str, values))}\x02")


def generate_store(out: str | os.PathLike, cfg: GenConfig, *, replace: bool = False) -> dict:
    """Write the store; returns a summary (segments, records, bytes, last offset).

    A store the generator wrote before is rewritten; a directory holding anything else (a broker's
    CommitLog, its index or checkpoint, any other file) is refused with a :class:`StoreLayoutError`
    unless ``replace`` (and then only the CommitLog segments are replaced).
    """
    foreign = foreign_files(out)
    if foreign and (not replace or not Path(out).is_dir()):
        raise StoreLayoutError(foreign[0], f"{out} holds files the generator did not write ({len(foreign)}, "
                                           "e.g. this one); gen writes a new store: choose an empty or new "
                                           "directory" + ("" if not Path(out).is_dir() else
                                                          ", or pass --replace to overwrite its CommitLog"))
    rng = np.random.default_rng(cfg.seed)
    commitlog = Path(out) / "commitlog"
    commitlog.mkdir(parents=True, exist_ok=True)
    for old in commitlog.iterdir():
        if old.is_file():
            old.unlink()
    n = cfg.messages
    topics = _topics(cfg)
    retry_topic = ("%RETRY%" + "GID_" + "x" * 130).encode()  # > 127 bytes: needs magic v2
    # Bodies come from a pool, so the generator spends its time on layout rather than on random bytes.
    pool_n = 512
    lo, hi = max(0, cfg.body_bytes // 2), max(1, cfg.body_bytes * 3 // 2)
    pool_lens = rng.integers(lo, hi + 1, pool_n)
    pool = [rng.bytes(int(x)) for x in pool_lens]
    pool_crc = [zlib.crc32(b) & 0x7FFFFFFF for b in pool]

    body_i = rng.integers(0, pool_n, n)
    topic_i = rng.integers(0, len(topics), n)
    v2 = rng.random(n) < cfg.share_v2
    born6 = rng.random(n) < cfg.share_ipv6
    store6 = rng.random(n) < cfg.share_ipv6 / 2
    tx = rng.random(n) < cfg.share_tx
    tx_kind = rng.integers(1, 4, n) * 4  # 0x4 prepared, 0x8 commit, 0xC rollback
    has_uniq = rng.random(n) < cfg.share_uniq
    n_keys = rng.integers(1, max(1, cfg.keys_per_message) + 1, n)
    distinct = cfg.distinct_keys or max(1, n // 2)
    key_ids = rng.integers(0, distinct, (n, max(1, cfg.keys_per_message)))
    tags = rng.integers(0, 6, n)
    queue_ids = rng.integers(0, cfg.queues, n)
    step = cfg.span_ms / max(1, n)
    store_ts = cfg.start_ms + (np.arange(n) * step).astype(np.int64) + rng.integers(0, 3, n)
    if cfg.clock_steps and cfg.clock_back_ms:
        run = max(1, n // (20 * (cfg.clock_steps + 1)))
        for at in np.linspace(0, n, cfg.clock_steps + 2)[1:-1].astype(np.int64):
            store_ts[at:at + run] -= cfg.clock_back_ms
    born_ts = store_ts - rng.integers(0, 2000, n)
    uniq_prefix = f"{cfg.seed & 0xFFFFFFFF:08X}7F0000012F1C"
    queue_offsets: dict[tuple[int, int], int] = {}
    # Drawn last and only when asked for, so a store without light queues keeps its bytes.
    lmq = rng.random(n) < cfg.share_lmq if cfg.share_lmq else np.zeros(n, bool)
    lmq_names = rng.integers(0, cfg.lmq_queues, (n, 3)) if cfg.share_lmq else None
    lmq_count = rng.integers(1, 4, n) if cfg.share_lmq else None
    lmq_offsets: dict[str, int] = {}
    batch = rng.random(n) < cfg.share_batch if cfg.share_batch else np.zeros(n, bool)
    batch_sizes = rng.integers(2, 17, n) if cfg.share_batch else None

    seg_size = cfg.segment_bytes
    base = 0
    seg_path = commitlog / f"{base:020d}"
    f = open(seg_path, "wb")
    pos = 0
    segments = 1
    records = 0
    buf = bytearray()
    born4 = struct.pack(">BBBBi", 10, 0, 0, 7, 52011)
    born6b = bytes.fromhex("20010db8000000000000000000000007") + struct.pack(">i", 52011)
    store4 = struct.pack(">BBBBi", 192, 168, 0, 10, 10911)
    store6b = bytes.fromhex("20010db80000000000000000000000aa") + struct.pack(">i", 10911)

    def flush() -> None:
        f.write(buf)
        buf.clear()

    for i in range(n):
        is_v2 = bool(v2[i])
        inner = bool(batch[i]) and not is_v2 and not tx[i]
        topic = retry_topic if is_v2 else BATCH_TOPIC if inner else topics[topic_i[i]]
        keys = " ".join(f"K{key_ids[i, j]}" for j in range(n_keys[i]))
        props = f"KEYS\x01{keys}\x02TAGS\x01Tag{tags[i]}\x02"
        if has_uniq[i]:
            props = f"UNIQ_KEY\x01{uniq_prefix}{i:012X}\x02" + props
        if inner:  # one record holding a producer's batch: its size and first queue offset (SendMessageProcessor)
            qkey = (-2, int(queue_ids[i]))
            props += f"INNER_NUM\x01{int(batch_sizes[i])}\x02INNER_BASE\x01{queue_offsets.get(qkey, 0)}\x02"
        elif lmq[i] and not is_v2:  # a %RETRY% topic's message is not dispatched to light queues (5.x)
            props += _light_queue_properties(lmq_names[i, :lmq_count[i]], lmq_offsets,
                                             counts=not (tx[i] and int(tx_kind[i]) in (L.SYSFLAG_TX_PREPARED,
                                                                                       L.SYSFLAG_TX_ROLLBACK)))
        props_b = props.encode()
        body = pool[body_i[i]]
        sys_flag = (int(tx_kind[i]) if tx[i] else 0) | (L.SYSFLAG_BORNHOST_V6 if born6[i] else 0) \
            | (L.SYSFLAG_STOREHOST_V6 if store6[i] else 0) | (INNER_BATCH_FLAGS if inner else 0)
        total = int(L.record_length(is_v2, bool(born6[i]), bool(store6[i]), len(body), len(topic), len(props_b)))
        if pos + total + L.BLANK_RECORD_SIZE > seg_size:
            # doAppend: a record must leave room for a blank record (END_FILE_MIN_BLANK_LENGTH), so one
            # that does not fit with that room closes the segment with a blank record.
            buf += _BLANK.pack(seg_size - pos, L.MAGIC_BLANK)
            flush()
            f.truncate(seg_size)
            f.close()
            base += seg_size
            segments += 1
            f = open(commitlog / f"{base:020d}", "wb")
            pos = 0
        # A broker's queue offsets count per (topic, queue), and only messages that enter a ConsumeQueue take
        # one: a prepared or rolled-back transaction record carries QUEUEOFFSET 0 (DefaultAppendMessageCallback).
        qkey = (-1 if is_v2 else -2 if inner else int(topic_i[i]), int(queue_ids[i]))
        if tx[i] and int(tx_kind[i]) in (L.SYSFLAG_TX_PREPARED, L.SYSFLAG_TX_ROLLBACK):
            qoff = 0
        else:
            qoff = queue_offsets.get(qkey, 0)
            queue_offsets[qkey] = qoff + (int(batch_sizes[i]) if inner else 1)
        buf += L.RECORD_PREFIX_STRUCT.pack(total, L.MAGIC_V2 if is_v2 else L.MAGIC_V1, pool_crc[body_i[i]], int(queue_ids[i]), 0,
                           qoff, base + pos, sys_flag, int(born_ts[i]))
        buf += born6b if born6[i] else born4
        buf += struct.pack(">q", int(store_ts[i]))
        buf += store6b if store6[i] else store4
        buf += L.RECORD_AFTER_HOSTS_STRUCT.pack(0, 0, len(body))
        buf += body
        buf += struct.pack(">h" if is_v2 else ">b", len(topic))
        buf += topic
        buf += struct.pack(">h", len(props_b))
        buf += props_b
        pos += total
        records += 1
        if len(buf) > 8 * 1024**2:
            flush()
    flush()
    f.truncate(seg_size)
    f.close()
    if cfg.share_batch:
        (Path(out) / "config").mkdir(exist_ok=True)
        (Path(out) / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": {
            BATCH_TOPIC.decode(): {"topicName": BATCH_TOPIC.decode(), "readQueueNums": cfg.queues,
                                   "writeQueueNums": cfg.queues, "perm": 6,
                                   "attributes": {"queue.type": L.BATCH_CQ}}}}, indent=1) + "\n")
    info = {"store": str(out), "segments": segments, "segment_bytes": seg_size, "messages": records,
            "end_offset": base + pos, "config": asdict(cfg), "format": GEN_FORMAT}
    (Path(out) / "generator.json").write_text(json.dumps(info, indent=2) + "\n")
    return info
