#!/usr/bin/env python3
"""Make the ConsumeQueue spec cases in tests/reference/cq-spec/ (a script, not a test module).

Each case is a small hand-made CommitLog that pins rules of ``../shared/spec/consume-queue.md`` the golden
cases do not exercise (delay levels, late-starting queues, gaps and repeats, transaction types, tags,
topic names, a full file followed by a dropped record, a CommitLog starting above 0, reading stops).
The CommitLogs come from this script alone (fixed seed, no randomness from outside), so running it again
writes the same bytes. The expected ConsumeQueues, manifest and lookup answers come from RocketMQ's own
code through the oracle of ``../shared/oracle`` (``ConsumeQueueBuild``, ``ConsumeQueueRead``) and the
helper driver ``tests/reference/cq-spec/oracle/CqSpecScan.java`` (prints what ``CommitLogScan`` reads).

    python3 tests/support/cq_spec_cases.py --commitlogs-only     # CommitLogs and case.json only (no Java)
    python3 tests/support/cq_spec_cases.py --check               # regenerate CommitLogs + case.json, compare
    python3 tests/support/cq_spec_cases.py --cp /tmp/oracle-build/cp.txt [CASE ...]   # everything, with the oracle

The committed data never needs Java. Only the oracle's output is committed as expected data. Beside it, a
small model written here (not rocketidx's builder) predicts every record's tagsCode, every queue file and
every lookup answer twice: once with consume-queue.md §6 read literally, once with correctMinOffset's own
steps. Where the literal reading disagrees with the oracle the script prints it (that is how the spec was
checked; see the README); where the exact model disagrees it writes nothing for that case unless
``--allow-model-diff`` is given.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unicodedata
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import rocketidx.layout as L  # noqa: E402  (read-only: record layout and magic codes)

OUT = ROOT / "tests" / "reference" / "cq-spec"
HELPER = OUT / "oracle" / "CqSpecScan.java"
ROCKETMQ_COMMIT = "8fc57f1468d182eea11c01e089c0250d647dc5f3"
SEED = 20251124
CQ_FILE_SIZE = 1280  # 64 entries per file, as the golden cases
SEG_SIZE = 16384  # CommitLog segment size (the s10 cases use 4,096)
UNIT = 20
BLANK_UNIT = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
CUSTOM_DELAY = "1s 3s 7s 1m 1h"
LONG_MIN, LONG_MAX = -2**63, 2**63 - 1


# ----------------------------------------------------------------------------------------------------
# Java semantics the model needs (each checked against the oracle on every run)

def jhash(s: str) -> int:
    """Java String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    b = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(b), 2):
        h = (31 * h + int.from_bytes(b[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def jdecode(src: bytes) -> str:
    """new String(bytes, UTF_8) of Java 17 (String.decodeUTF8_UTF16): malformed input becomes U+FFFD.

    Not Python's ``decode("utf-8", "replace")``: a UTF-8-encoded surrogate (ED A0..BF xx) is ONE U+FFFD in Java,
    three in Python. Checked against Java 17 on 80,000 fuzzed byte strings, and against the oracle's topics.
    """
    def cont(b: int) -> bool:
        return (b & 0xC0) == 0x80

    out: list[str] = []
    sp, sl, repl = 0, len(src), "\ufffd"
    while sp < sl:
        b1 = src[sp]
        sp += 1
        if b1 < 0x80:
            out.append(chr(b1))
        elif (b1 >> 5) == 0b110 and (b1 & 0x1E) != 0:  # 2 bytes
            if sp < sl:
                b2 = src[sp]
                if cont(b2):
                    out.append(chr(((b1 & 0x1F) << 6) | (b2 & 0x3F)))
                    sp += 1
                else:
                    out.append(repl)
                continue
            out.append(repl)
            break
        elif (b1 >> 4) == 0b1110:  # 3 bytes
            if sp + 1 < sl:
                b2, b3 = src[sp], src[sp + 1]
                if (b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not cont(b2) or not cont(b3):  # isMalformed3
                    out.append(repl)
                    sp += 0 if ((b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not cont(b2)) else 1  # malformed3
                else:
                    c = ((b1 & 0x0F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F)
                    out.append(repl if 0xD800 <= c <= 0xDFFF else chr(c))
                    sp += 2
                continue
            if sp < sl and ((b1 == 0xE0 and (src[sp] & 0xE0) == 0x80) or not cont(src[sp])):
                out.append(repl)
                continue
            out.append(repl)
            break
        elif (b1 >> 3) == 0b11110:  # 4 bytes
            if sp + 2 < sl:
                b2, b3, b4 = src[sp], src[sp + 1], src[sp + 2]
                uc = ((b1 & 0x07) << 18) | ((b2 & 0x3F) << 12) | ((b3 & 0x3F) << 6) | (b4 & 0x3F)
                if not (cont(b2) and cont(b3) and cont(b4)) or not 0x10000 <= uc <= 0x10FFFF:
                    out.append(repl)  # malformed4: skip 1, 2 or 3 bytes in all
                    if b1 > 0xF4 or (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF) or (b1 == 0xF4 and (b2 & 0xF0) != 0x80) \
                            or not cont(b2):
                        pass
                    elif not cont(b3):
                        sp += 1
                    else:
                        sp += 2
                else:
                    out.append(chr(uc))
                    sp += 3
                continue
            if b1 > 0xF4 or (sp < sl and ((b1 == 0xF0 and not 0x90 <= src[sp] <= 0xBF)
                                          or (b1 == 0xF4 and (src[sp] & 0xF0) != 0x80) or not cont(src[sp]))):
                out.append(repl)
                continue
            sp += 1
            if sp < sl and not cont(src[sp]):
                out.append(repl)
                continue
            out.append(repl)
            break
        else:
            out.append(repl)
    return "".join(out)


def jparse(s: str, lo: int, hi: int) -> int | None:
    """Integer/Short/Long.parseXxx(s) for radix 10: optional sign, then Character.digit per UTF-16 unit."""
    units = s.encode("utf-16-be", "surrogatepass")
    chars = [chr(int.from_bytes(units[i:i + 2], "big")) for i in range(0, len(units), 2)]
    if not chars:
        return None
    neg = chars[0] == "-"
    if chars[0] in "+-":
        chars = chars[1:]
        if not chars:
            return None
    v = 0
    for c in chars:
        d = unicodedata.decimal(c, None) if not 0xD800 <= ord(c) <= 0xDFFF else None
        if d is None:
            return None
        v = v * 10 + d
    v = -v if neg else v
    return v if lo <= v <= hi else None


def string2messageProperties(props: str) -> dict[str, str]:
    """MessageDecoder.string2messageProperties (indices in UTF-16 units, as Java's String)."""
    u = props.encode("utf-16-be", "surrogatepass")
    units = [u[i:i + 2] for i in range(0, len(u), 2)]
    n = len(units)

    def find(ch: str, start: int) -> int:
        code = ch.encode("utf-16-be")
        for i in range(start, n):
            if units[i] == code:
                return i
        return -1

    def sub(a: int, b: int) -> str:
        return b"".join(units[a:b]).decode("utf-16-be", "surrogatepass")

    out: dict[str, str] = {}
    index = 0
    while index < n:
        new = find("\x02", index)
        if new < 0:
            new = n
        if new - index >= 3:
            kv = find("\x01", index)
            if index < kv < new - 1:
                out[sub(index, kv)] = sub(kv + 1, new)
        index = new + 1
    return out


def delay_table(spec: str) -> list[int]:
    unit = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    return [int(v[:-1]) * unit[v[-1]] for v in spec.split(" ")]


# ----------------------------------------------------------------------------------------------------
# Records and CommitLog segments

@dataclass
class Rec:
    topic: bytes
    qid: int
    qoff: int
    props: bytes  # the PROPERTIES bytes as stored
    sys: int = 0
    phy: Callable[["Placed"], int] | int | None = None  # None: its own position (what a broker writes)
    body: bytes | None = None
    label: str | None = None
    note: str = ""
    v2: bool | None = None  # None: v2 when the topic is longer than 127 bytes (as the broker chooses)
    # filled when laid out
    pos: int = -1
    size: int = -1
    stored_phy: int = -1
    store_ts: int = 0
    born_ts: int = 0
    segment: str = ""
    seg_off: int = -1


@dataclass
class Placed:
    """What a phy function sees: the record's own absolute position and size, and earlier labelled ones."""
    pos: int
    size: int
    labels: dict[str, Rec]

    def end(self, label: str) -> int:
        r = self.labels[label]
        return r.stored_phy + r.size


def props(*pairs, tail: bytes = b"") -> bytes:
    """name \\x01 value \\x02 ... (UTF-8); a pair may be raw bytes to write as they are."""
    out = b""
    for p in pairs:
        if isinstance(p, bytes):
            out += p
        else:
            k, v = p
            out += f"{k}\x01{v}\x02".encode("utf-8", "surrogatepass")
    return out + tail


BORN4 = struct.pack(">BBBBi", 10, 0, 0, 7, 52011)
BORN6 = bytes.fromhex("20010db8000000000000000000000007") + struct.pack(">i", 52011)
STORE4 = struct.pack(">BBBBi", 192, 168, 0, 10, 10911)
STORE6 = bytes.fromhex("20010db80000000000000000000000aa") + struct.pack(">i", 10911)
_BLANK = struct.Struct(">iI")


def encode(r: Rec, phy: int) -> bytes:
    v2 = r.v2 if r.v2 is not None else len(r.topic) > 127
    born6, store6 = bool(r.sys & L.SYSFLAG_BORNHOST_V6), bool(r.sys & L.SYSFLAG_STOREHOST_V6)
    body = r.body or b""
    total = int(L.record_length(v2, born6, store6, len(body), len(r.topic), len(r.props)))
    crc = zlib.crc32(body) & 0x7FFFFFFF
    sys_flag = r.sys - (1 << 32) if r.sys & 0x80000000 else r.sys
    out = L.RECORD_PREFIX_STRUCT.pack(total, L.MAGIC_V2 if v2 else L.MAGIC_V1, crc, r.qid, 0, r.qoff, phy,
                                      sys_flag, r.born_ts)
    out += BORN6 if born6 else BORN4
    out += struct.pack(">q", r.store_ts)
    out += STORE6 if store6 else STORE4
    out += L.RECORD_AFTER_HOSTS_STRUCT.pack(0, 0, len(body)) + body
    out += struct.pack(">h" if v2 else ">b", len(r.topic)) + r.topic
    out += struct.pack(">h", len(r.props)) + r.props
    assert len(out) == total
    return out


def layout(recs: list[Rec], seg_size: int, base: int) -> dict[str, bytes]:
    """Segments as DefaultAppendMessageCallback.doAppend fills them: a record that does not leave room for
    an 8-byte blank record closes the segment with a blank record; the rest of a segment is zeros."""
    segs: dict[str, bytearray] = {}
    cur_base, pos = base, 0
    buf = bytearray()
    labels: dict[str, Rec] = {}
    for r in recs:
        size = len(encode(r, 0))
        if pos + size + L.BLANK_RECORD_SIZE > seg_size:
            buf += _BLANK.pack(seg_size - pos, L.MAGIC_BLANK)
            segs[f"{cur_base:020d}"] = buf
            cur_base += seg_size
            pos, buf = 0, bytearray()
        r.pos, r.size, r.segment, r.seg_off = cur_base + pos, size, f"{cur_base:020d}", pos
        if r.phy is None:
            r.stored_phy = r.pos
        elif isinstance(r.phy, int):
            r.stored_phy = r.phy
        else:
            r.stored_phy = r.phy(Placed(r.pos, size, labels))
        buf += encode(r, r.stored_phy)
        pos += size
        if r.label:
            labels[r.label] = r
    segs[f"{cur_base:020d}"] = buf
    return {k: bytes(v) + bytes(seg_size - len(v)) for k, v in segs.items()}


# ----------------------------------------------------------------------------------------------------
# Case definitions

@dataclass
class Case:
    name: str
    description: str
    rules: list[str]
    recs: list[Rec]
    base: int = 0
    seg_size: int = SEG_SIZE
    delay: str | None = None  # messageDelayLevel when not the broker default
    expect_stop: str | None = None  # label of the record where reading must stop (None: end of data)
    notes: list[str] = field(default_factory=list)


class Gen:
    """Helper to write a case's records: deterministic bodies and timestamps (one random.Random per case)."""

    def __init__(self, seed: int, start_ms: int):
        self.rng = random.Random(seed)
        self.ts = start_ms
        self.recs: list[Rec] = []

    def add(self, topic: str | bytes, qid: int, qoff: int, *pairs, sys: int = 0, phy=None, label=None,
            note: str = "", body: bytes | None = None, raw_props: bytes | None = None,
            v2: bool | None = None) -> Rec:
        t = topic if isinstance(topic, bytes) else topic.encode()
        if raw_props is None:
            raw_props = props(*pairs)
        if body is None:
            body = self.rng.randbytes(self.rng.randint(8, 48))
            if sys & L.SYSFLAG_COMPRESSED:
                body = zlib.compress(body)
        self.ts += self.rng.randint(1, 1500)
        r = Rec(t, qid, qoff, raw_props, sys=sys, phy=phy, body=body, label=label, note=note, v2=v2)
        r.store_ts, r.born_ts = self.ts, self.ts - self.rng.randint(0, 2000)
        self.recs.append(r)
        return r

    def interleave(self, streams: list[list[tuple]]) -> None:
        """Add several queues' records mixed in a deterministic random order, keeping each queue's order."""
        idx = [0] * len(streams)
        while True:
            live = [k for k in range(len(streams)) if idx[k] < len(streams[k])]
            if not live:
                return
            k = self.rng.choice(live)
            args, kw = streams[k][idx[k]]
            idx[k] += 1
            self.add(*args, **kw)


def A(*args, **kw) -> tuple:
    """One record's arguments to Gen.add, for Gen.interleave."""
    return args, kw


DELAY_VALUES = [str(i) for i in range(1, 19)] + [
    "19", "99", "2147483647",  # above the table: the last level
    "0", "-1", "-2147483648", "-0", "+0",  # not > 0: the TAGS hash stays
    "+3", "06", "0000000000018", "\uff13", "\u0663",  # parseInt accepts these: +3, 6, 18, fullwidth 3, Arabic-Indic 3
]


def case_delay(name: str, delay: str | None) -> Case:
    g = Gen(SEED + 1, 1_700_000_000_000)  # the same records for the default and the custom table
    n: dict[tuple[str, int], int] = {}

    def q(qid: int, topic: str = SCHEDULE) -> int:  # the next QUEUEOFFSET of a queue
        n[(topic, qid)] = n.get((topic, qid), -1) + 1
        return n[(topic, qid)]

    for rnd in range(2):
        for j, v in enumerate(DELAY_VALUES):
            qid = (j + rnd) % 2
            g.add(SCHEDULE, qid, q(qid), ("TAGS", f"TagD{rnd}"), ("DELAY", v), ("REAL_TOPIC", "TopicA"),
                  ("REAL_QID", "0"), note=f"DELAY={v!r} with TAGS")
            g.add(SCHEDULE, qid, q(qid), ("DELAY", v), ("REAL_TOPIC", "TopicA"), note=f"DELAY={v!r} without TAGS")
        g.add(SCHEDULE, 0, q(0), ("TAGS", "NoDelay"), note="SCHEDULE_TOPIC_XXXX without DELAY, with TAGS")
        g.add(SCHEDULE, 1, q(1), note="SCHEDULE_TOPIC_XXXX without DELAY or TAGS")
        g.add(SCHEDULE, 0, q(0), ("TAGS", "EmptyDelay"), b"DELAY\x01\x02", note="empty DELAY (property dropped)")
        g.add(SCHEDULE, 1, q(1), ("TAGS", "Dup50"), ("DELAY", "5"), ("DELAY", "0"),
              note="DELAY twice: the later one (0) wins")
        g.add(SCHEDULE, 0, q(0), ("TAGS", "Dup05"), ("DELAY", "0"), ("DELAY", "5"),
              note="DELAY twice: the later one (5) wins")
        g.add(SCHEDULE, 1, q(1), ("TAGS", "NameSpace"), ("DELAY ", "3"), note="property 'DELAY ' is not DELAY")
        for v in ("3", "99", "x"):
            g.add("TopicDelay", rnd % 2, q(rnd % 2, "TopicDelay"), ("TAGS", "OtherTopic"), ("DELAY", v),
                  note=f"DELAY={v!r} on another topic: ignored")
            g.add("TopicDelay", 2, q(2, "TopicDelay"), ("DELAY", v), note=f"DELAY={v!r} on another topic, no TAGS")
        g.add("schedule_topic_xxxx", 0, rnd, ("TAGS", "Lower"), ("DELAY", "3"),
              note="lower-case schedule topic: not SCHEDULE_TOPIC_XXXX")
    rules = ["§4 tagsCode: DELAY on SCHEDULE_TOPIC_XXXX", "§4 level above the table's last counts as the last",
             "§4 level <= 0 keeps the TAGS hash", "§4 Integer.parseInt accepts +3, 06, fullwidth and other Nd digits",
             "§4 DELAY on any other topic is ignored", "§2 an empty DELAY never reaches parseInt",
             "§2 a later duplicate property wins"]
    if delay is None:
        desc = ("SCHEDULE_TOPIC_XXXX records with DELAY 1..18, above 18 (19, 99, 2147483647), <= 0 (0, -1, -0, +0, "
                "MIN_VALUE), '+3', '06', '0000000000018', fullwidth '３', Arabic-Indic '٣', with and without TAGS; "
                "empty and duplicate DELAY; DELAY on other topics (ignored); default delay table")
        return Case(name, desc, rules + ["§4 default messageDelayLevel table"], g.recs)
    desc = (f"the same CommitLog as s01 (byte for byte), built by a broker with messageDelayLevel={delay!r}: "
            "5 levels, so a level above 5 counts as 5 (1 h)")
    return Case(name, desc, rules + ["§4 the broker's own messageDelayLevel table (broker.conf)"], g.recs,
                delay=delay, notes=[f"messageDelayLevel={delay} (broker.conf beside case.json): "
                                    "the builder must use this table, not the default"])


def case_late() -> Case:
    g = Gen(SEED + 3, 1_700_100_000_000)
    T = "TopicLate"
    starts = {0: (0, 70), 1: (5, 81), 2: (100, 151), 3: (64, 91), 4: (63, 71), 5: (300, 311), 6: (1, 2), 7: (127, 131)}
    g.interleave([[A(T, qid, k, ("TAGS", f"L{qid}")) for k in range(a, b)] for qid, (a, b) in starts.items()])
    return Case("s03-queue-starts-late",
                "queues whose first QUEUEOFFSET is > 0: 5 (inside the first file), 100 (first file created at "
                "1280), 64 (exactly a file start: no blank), 63 (last slot of the first file), 300 (file 5120, "
                "no file below), 1 (one record), 127 (file 1280, 63 blanks); queue 0 starts at 0 (control); "
                "a CommitLog starting at 0, so blank slots answer as correctMinOffset decides",
                ["§5 step 2 first file at q*20 - (q*20 % fileSize)", "§5 step 3 fillPreBlank",
                 "§1 blank entry (0, 0x7FFFFFFF, 0)", "§6 minimum after a restart (correctMinOffset)",
                 "§6 lookups of blank slots and of slots below the first file"], g.recs)


def case_gaps() -> Case:
    g = Gen(SEED + 4, 1_700_200_000_000)
    T = "TopicGap"
    s0 = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 21, 22, 11, 12, 13, 30, 14, 15, 16, 17] + list(range(40, 90)) + [5, 90]
    s1 = list(range(0, 6)) + [5, 5, 2] + list(range(6, 63)) + [62, 63, 63, 64, 10] + list(range(65, 71))
    s2 = list(range(0, 10)) + [0, 10, 11, 12, 0, 0, 1, 2, 3, 4, 5, 15] + list(range(16, 64)) + [0, 64, 65, 66]
    s4 = list(range(0, 61)) + [200, 201, 202, 203, 70, 71, 204]
    s5 = [5, 10, 7, 3, 8, 9, 12]
    streams = [[A(T, 0, k) for k in s0], [A(T, 1, k) for k in s1], [A(T, 2, k) for k in s2],
               [A(T, 4, k) for k in s4], [A(T, 5, k) for k in s5]]
    g.interleave(streams)
    # queue 3: hand-made PHYSICALOFFSET fields (step 1 and step 7), in CommitLog order after the others
    for k in range(0, 10):
        g.add(T, 3, k, label=f"g3-{k}")
    g.add(T, 3, 10, phy=lambda p: p.end("g3-9") - p.size, note="phy+size == maxPhysicOffset: step 1 drops it")
    g.add(T, 3, 10, phy=lambda p: p.end("g3-9") - p.size + 1, label="g3-10",
          note="phy+size == maxPhysicOffset+1: appended, commitLogOffset below its own position")
    g.add(T, 3, 11, phy=0, note="PHYSICALOFFSET 0, far below: step 1 drops it")
    g.add(T, 3, 0, phy=lambda p: p.end("g3-10") - p.size, note="QUEUEOFFSET 0 but step 1 comes first: dropped")
    g.add(T, 3, 99, phy=lambda p: p.end("g3-10") - p.size - 7, note="QUEUEOFFSET 99 but step 1 drops it: no gap")
    g.add(T, 3, 11, label="g3-11")
    g.add(T, 3, 12, phy=lambda p: p.labels["g3-11"].stored_phy + 1, body=bytes(range(200)) * 2, label="g3-12",
          note="PHYSICALOFFSET = previous entry's + 1, bigger record: phy+size > maxPhysicOffset, appended")
    g.add(T, 3, 13, label="g3-13")
    g.add(T, 3, 5, label="g3-drop4", note="QUEUEOFFSET 5 < write position: step 4 drops it (maxPhysicOffset stays)")
    g.add(T, 3, 14, phy=lambda p: p.end("g3-drop4") - p.size,
          note="phy+size == end of the step-4-dropped record: appended, since a dropped record does not move "
               "maxPhysicOffset (step 7)")
    for k in range(15, 20):
        g.add(T, 3, k)
    return Case("s04-gaps-repeats-zero-maxphy",
                "queue 0: QUEUEOFFSET jumps ahead (10 -> 20, 17 -> 40) and comes back (11, 12, 13: dropped or "
                "appended depending on the shifted write position); queue 1: repeated and lower offsets, also at "
                "a file boundary; queue 2: QUEUEOFFSET 0 in the middle (appended; later lower offsets dropped); "
                "queue 3: hand-made PHYSICALOFFSET fields: phy+size == maxPhysicOffset (dropped), == +1 "
                "(appended), 0 (dropped), a step-1 drop with QUEUEOFFSET 0 and 99, a record after a step-4 drop; "
                "queue 4: a gap that crosses a file boundary; queue 5: late start (5) then a gap and a 'lower' "
                "offset equal to the write position",
                ["§5 step 1", "§5 step 4", "§5 step 5 (gap appended at the write position)", "§5 step 6",
                 "§5 step 7", "§5 step 2 (never a jump)", "§4 commitLogOffset is the stored PHYSICALOFFSET",
                 "§6 lookups read the slot, not the QUEUEOFFSET"], g.recs)


def case_sysflag() -> Case:
    g = Gen(SEED + 5, 1_700_300_000_000)
    T = "TopicTx"
    extras = [0, L.SYSFLAG_COMPRESSED, L.SYSFLAG_MULTI_TAGS, L.SYSFLAG_BORNHOST_V6, L.SYSFLAG_STOREHOST_V6,
              0x30, 0x40, L.SYSFLAG_INNER_BATCH, 0x100 | 0x1, 0x300 | 0x1, 0x700, 0x10000, 0x7FFF0000,
              0x80000000, 0xFFFFFFF3]
    n = {0: 0, 1: 0}
    for rnd in range(2):
        for j, extra in enumerate(extras):
            for tx in (0, L.SYSFLAG_TX_PREPARED, L.SYSFLAG_TX_COMMIT, L.SYSFLAG_TX_ROLLBACK):
                qid = (j + rnd) % 2
                sysf = extra | tx
                pairs = [("TAGS", f"Tx{tx}")] if j % 3 else []
                if tx in (0, L.SYSFLAG_TX_COMMIT):
                    g.add(T, qid, n[qid], *pairs, sys=sysf, note=f"sysFlag 0x{sysf:08X}")
                    n[qid] += 1
                else:
                    # a broker stores prepared/rollback records with QUEUEOFFSET 0; every other one here
                    # carries the next offset instead: neither makes an entry
                    qo = 0 if (j + rnd) % 2 == 0 else n[qid]
                    g.add(T, qid, qo, *pairs, sys=sysf, note=f"sysFlag 0x{sysf:08X}, QUEUEOFFSET {qo}")
    return Case("s05-sysflag-transactions",
                "transaction types NOT_TYPE, PREPARED, COMMIT, ROLLBACK, each combined with other sysFlag bits "
                "(compressed, multi-tags, IPv6 born/store hosts, 0x40, inner batch, compression types, high bits, "
                "all bits); prepared/rollback records carry QUEUEOFFSET 0 or the next offset",
                ["§3 only sysFlag & 0xC decides (0 and 8 make an entry, 4 and 12 none)",
                 "§3 no other sysFlag bit matters", "§5 step 6 does not apply to skipped records"], g.recs)


def case_tags() -> Case:
    g = Gen(SEED + 6, 1_700_400_000_000)
    T = "TopicTags"
    variants: list[tuple[str, dict]] = [
        ("absent", {}),
        ("empty value", {"extra": [b"TAGS\x01\x02"]}),
        ("ASCII", {"pairs": [("TAGS", "TagA")]}),
        ("ASCII", {"pairs": [("TAGS", "TagB")]}),
        ("TagA || TagB", {"pairs": [("TAGS", "TagA || TagB")]}),
        ("TagA || TagB, multi-tags sysFlag", {"pairs": [("TAGS", "TagA || TagB")], "sys": L.SYSFLAG_MULTI_TAGS}),
        ("TagA||TagB", {"pairs": [("TAGS", "TagA||TagB")]}),
        ("spaces kept", {"pairs": [("TAGS", " TagA ")]}),
        ("CJK", {"pairs": [("TAGS", "标签")]}),
        ("Latin-1 accents", {"pairs": [("TAGS", "Ünïcødé")]}),
        ("surrogate pair", {"pairs": [("TAGS", "🚀")]}),
        ("surrogate pair inside", {"pairs": [("TAGS", "tag🚀x")]}),
        ("math digit (non-BMP)", {"pairs": [("TAGS", "𝟘")]}),
        ("hashCode Integer.MIN_VALUE", {"pairs": [("TAGS", "polygenelubricants")]}),
        ("hashCode 0 (NUL)", {"pairs": [("TAGS", "\x00")]}),
        ("negative hashCode", {"pairs": [("TAGS", "zzzzzzzzzz")]}),
        ("long tag", {"pairs": [("TAGS", "Tag-" + "x" * 400)]}),
        ("duplicate TAGS: later wins", {"pairs": [("TAGS", "TagA"), ("TAGS", "TagB")]}),
        ("lower-case name: not TAGS", {"pairs": [("tags", "TagA")]}),
        ("value holding \\x01", {"extra": [b"TAGS\x01a\x01b\x02"]}),
        ("malformed UTF-8 in the value", {"extra": [b"TAGS\x01Tag\xffX\x02"]}),
        ("CESU-8 surrogate bytes in the value", {"extra": [b"TAGS\x01T\xed\xa0\xbd\xed\xb8\x80\x02"]}),
        ("last property without a trailing separator", {"extra": [b"TAGS\x01tail"]}),
        ("3-unit piece", {"extra": [b"TAGS\x01x\x02"]}),
        ("name only", {"extra": [b"TAGS\x02"]}),
    ]
    n = {0: 0, 1: 0}
    for rnd in range(2):
        for j, (what, v) in enumerate(variants):
            qid = (j + rnd) % 2
            g.add(T, qid, n[qid], *v.get("pairs", []), *v.get("extra", []), sys=v.get("sys", 0), note=f"TAGS: {what}")
            n[qid] += 1
    # no properties at all (PROPERTIESLENGTH 0)
    g.add(T, 0, n[0], raw_props=b"", note="no properties (PROPERTIESLENGTH 0)")
    return Case("s06-tags-hash",
                "TAGS absent, empty, ASCII, 'TagA || TagB' (one hash, with and without the multi-tags flag), "
                "CJK, accents, surrogate pairs, hashCode MIN_VALUE / 0 / negative (sign-extended), a long tag, "
                "duplicates, a lower-case name, a value holding \\x01, malformed UTF-8 and CESU-8 bytes in the "
                "value, a last property without separator, no properties at all",
                ["§4 tagsCode = String.hashCode over UTF-16 units, sign-extended", "§4 no TAGS gives 0",
                 "§2 string2messageProperties (empty value absent, later duplicate wins)"], g.recs)


def case_topics() -> Case:
    g = Gen(SEED + 7, 1_700_500_000_000)
    bad, good = b"TopicBad\xff", "TopicBad\ufffd".encode()
    shared = []  # queue 0: one offset sequence over both byte forms
    for k in range(40):
        shared.append(A(bad if k % 3 else good, 0, k, ("TAGS", "shared")))
    own_bad = [A(bad, 1, k, ("TAGS", "bad")) for k in range(12)]  # queue 1: each form from 0: they collide
    own_good = [A(good, 1, k, ("TAGS", "good")) for k in range(12)]
    malformed = [b"Mal\xc0\xaf1", b"Mal\xed\xa0\x802", b"Mal\xe2\x823", b"Mal\xf0\x9f\x984", b"Mal\xf4\x90\x80\x805",
                 b"Mal\x80\x806", b"Mal\xf8\x88\x80\x80\x807", b"Mal\xe0\x80\xaf8", b"Mal\xef\xbf\xbe9"]
    other = [[A(t, 0, k) for k in range(3)] for t in malformed]
    retry = [A("%RETRY%GroupA", 0, k, ("TAGS", "r")) for k in range(10)]
    dlq = [A("%DLQ%GroupA", 0, k) for k in range(6)]
    cjk = [A("主题-订单", 1, k, ("TAGS", "订单")) for k in range(5)]
    t127, t128 = "T127_" + "a" * 122, "T128_" + "b" * 123
    t255 = "T255_" + "c" * 250
    t255cjk = "长" * 85
    longs = [[A(t127, 0, k) for k in range(3)], [A(t128, 0, k) for k in range(3)],
             [A(t255, 0, k) for k in range(66)], [A(t255cjk, 2, k) for k in range(3)]]
    g.interleave([shared, own_bad, own_good, retry, dlq, cjk] + other + longs)
    return Case("s07-topics",
                "a malformed-UTF-8 topic (TopicBad\\xff) and the topic its U+FFFD decoding spells share queues "
                "(queue 0: one offset sequence over both; queue 1: each from 0, so they collide); other malformed "
                "byte sequences (overlong, surrogate, truncated, above U+10FFFF, lone continuation, 5-byte, "
                "noncharacter) each become their own decoded topic; %RETRY% and %DLQ% topics; a CJK topic; topics "
                "of 127 (v1), 128 and 255 bytes (v2, one of them 85 CJK characters)",
                ["§1 <topic> is the Java-decoded topic re-encoded as UTF-8", "§1 %RETRY%/%DLQ% topics",
                 "§1 topics up to 255 bytes", "§1 one queue = one (decoded topic, queueId)"], g.recs,
                notes=["topics longer than 127 bytes are stored with magic v2 (a v1 topic length is a signed byte), "
                       "as the broker chooses"])


def case_full() -> Case:
    g = Gen(SEED + 8, 1_700_600_000_000)
    T = "TopicFull"
    st = {
        0: list(range(64)) + [10],
        1: list(range(64)) + [63, 64, 65],
        2: list(range(128)) + [5],
        4: list(range(60, 64)) + [61],
        5: list(range(64)) + [0, 1, 65],
    }
    g.interleave([[A(T, qid, k) for k in ks] for qid, ks in st.items()])
    for k in range(64):
        g.add(T, 3, k, label=f"f3-{k}")
    g.add(T, 3, 64, phy=lambda p: p.end("f3-63") - p.size,
          note="after a full file, a record dropped by step 1: no new file (step 1 comes before step 2)")
    return Case("s08-full-file-then-dropped",
                "queues whose last file is exactly full when the next record is dropped by step 4: the new file "
                "is created and stays all zeros (queue 0 after 64 entries, queue 2 after 128, queue 4 after 60 "
                "blanks + 4 entries); queue 1: the empty file is later written by offsets 64, 65; queue 5: "
                "QUEUEOFFSET 0 after a full file is appended in the new file (step 6), then 1 is dropped; "
                "queue 3: a record dropped by step 1 after a full file creates no file",
                ["§1 a new file stays all zeros when its record is dropped by step 4", "§5 step 2",
                 "§5 step 1 comes before step 2", "§5 step 6", "§6 lookups after a restart with a zero last file"],
                g.recs)


def case_base() -> Case:
    base = 4 * SEG_SIZE
    g = Gen(SEED + 9, 1_700_700_000_000)
    T = "TopicBase"
    below = lambda p: p.pos - base  # noqa: E731  a hand-made PHYSICALOFFSET below the CommitLog's minimum
    st = [
        [A(T, 0, k) for k in range(70)],
        [A(T, 1, k) for k in range(10, 41)],
        [A(T, 2, k) for k in range(100, 121)],
        [A(T, 3, k, phy=below, note="PHYSICALOFFSET below the minimum") for k in range(10)],
        [A(T, 4, k, phy=below if k < 5 else None) for k in range(30)],
        [A(T, 5, k, phy=below if k < 66 else None) for k in range(72)],
        [A(T, 6, k) for k in range(64, 80)],
        [A(T, 7, k, phy=below if k < 20 else None) for k in range(7, 40)],
    ]
    g.interleave(st)
    return Case("s09-commitlog-base-above-zero",
                f"the first CommitLog segment starts at {base} (older segments deleted): blank slots and entries "
                "pointing below it answer nothing after a restart. Queue 0 from 0; queues 1, 2, 6 start late (10, "
                "100, 64); hand-made PHYSICALOFFSET fields below the minimum: all of queue 3 (no valid entry: the "
                "minimum is the end), the first 5 of queue 4, the first 66 of queue 5 (past the first file, where "
                "correctMinOffset does not look), the first 13 of queue 7 (late start at 7)",
                ["§6 correctMinOffset with a CommitLog minimum above 0", "§6 blank slots below the minimum",
                 "§6 last slot below the minimum: the minimum is the queue's end",
                 "§6 the search runs inside the queue's first file only", "§5 step 3 fillPreBlank"],
                g.recs, base=base)


def case_stop(suffix: str, what: str, bad: tuple, rules: list[str]) -> Case:
    g = Gen(SEED + 10 + len(suffix), 1_700_800_000_000)
    n = {}

    def nq(t, qid):
        n[(t, qid)] = n.get((t, qid), -1) + 1
        return n[(t, qid)]

    controls = [
        (SCHEDULE, 0, [("TAGS", "ok"), ("DELAY", "3")]),
        (SCHEDULE, 0, [("TAGS", "ok"), ("DELAY", "+2")]),
        ("TopicStop", 0, [("TAGS", "a"), ("DELAY", " 3")]),  # another topic: DELAY never parsed
        ("TopicStop", 1, [("DELAY", "1_0")]),
        ("TopicStop", 0, [("INNER_NUM", "40000")]),  # INNER_BASE absent: not parsed
        ("TopicStop", 1, [("INNER_BASE", "1_000")]),  # INNER_NUM absent: not parsed
        ("TopicStop", 0, [("INNER_NUM", "5"), ("INNER_BASE", "100")]),
        ("TopicStop", 1, [("INNER_NUM", "+5"), ("INNER_BASE", "-100")]),
        ("TopicStop", 0, [("INNER_NUM", "\uff15"), ("INNER_BASE", "\u0661\u0660")]),
    ]
    for rnd in range(4):
        for t, qid, pairs in controls:
            g.add(t, qid, nq(t, qid), *pairs)
    t, qid, pairs = bad
    g.add(t, qid, nq(t, qid), *pairs, label="bad", note=f"reading stops here: {what}")
    for rnd in range(4):
        for t, qid, pairs in controls:
            g.add(t, qid, nq(t, qid), *pairs, note="after the stop: never read")
    return Case(f"s10{suffix}", f"reading stops at a valid-looking record whose {what}; the records before it "
                f"(SCHEDULE_TOPIC_XXXX with DELAY 3 and +2, INNER_NUM/INNER_BASE pairs that parse, and odd values "
                f"where only one of the two is present or the topic is not the schedule topic) make entries, "
                f"nothing after it does (later segments included); 4 KiB segments", rules, g.recs, expect_stop="bad",
                seg_size=4096, notes=["CommitLog segments of 4,096 bytes (the other cases use 16,384)"])


def all_cases() -> list[Case]:
    stop_delay = ["§2 a DELAY on SCHEDULE_TOPIC_XXXX that Integer.parseInt rejects stops reading",
                  "§2 the first invalid record ends reading for good"]
    stop_inner = ["§2 INNER_NUM and INNER_BASE both present, one not parsing, stops reading",
                  "§2 the first invalid record ends reading for good"]
    return [
        case_delay("s01-delay-levels-default", None),
        case_delay("s02-delay-levels-custom-table", CUSTOM_DELAY),
        case_late(),
        case_gaps(),
        case_sysflag(),
        case_tags(),
        case_topics(),
        case_full(),
        case_base(),
        case_stop("a-stop-delay-space", "DELAY on SCHEDULE_TOPIC_XXXX is ' 3' (whitespace)",
                  (SCHEDULE, 0, [("TAGS", "bad"), ("DELAY", " 3")]), stop_delay),
        case_stop("b-stop-delay-underscore", "DELAY on SCHEDULE_TOPIC_XXXX is '1_0' (Python's int accepts it)",
                  (SCHEDULE, 0, [("DELAY", "1_0")]), stop_delay),
        case_stop("c-stop-delay-nonbmp-digit", "DELAY on SCHEDULE_TOPIC_XXXX is '𝟑' (U+1D7D1, a digit outside "
                  "the BMP: two UTF-16 units, neither a digit for Java; Python's int accepts it)",
                  (SCHEDULE, 0, [("DELAY", "\U0001D7D1")]), stop_delay),
        case_stop("d-stop-delay-int-overflow", "DELAY on SCHEDULE_TOPIC_XXXX is '2147483648' (above "
                  "Integer.MAX_VALUE)", (SCHEDULE, 0, [("TAGS", "x"), ("DELAY", "2147483648")]), stop_delay),
        case_stop("e-stop-inner-base-not-long", "INNER_BASE is '1_000' while INNER_NUM is present",
                  ("TopicStop", 0, [("INNER_NUM", "1"), ("INNER_BASE", "1_000")]), stop_inner),
        case_stop("f-stop-inner-num-not-short", "INNER_NUM is '40000' (above Short.MAX_VALUE) while INNER_BASE is "
                  "present", ("TopicStop", 1, [("INNER_NUM", "40000"), ("INNER_BASE", "7")]), stop_inner),
    ]


# ----------------------------------------------------------------------------------------------------
# The spec model (independent of rocketidx): what each record should do, per the spec's text

def model_record(r: Rec, delay: str | None) -> dict:
    """Parse a record as the spec says; returns its decoded topic, properties, tagsCode, or the stop reason."""
    topic = jdecode(r.topic)
    pm = string2messageProperties(jdecode(r.props)) if r.props else {}
    tags = pm.get("TAGS")
    code = jhash(tags) if tags else 0
    stop = None
    if topic == SCHEDULE and "DELAY" in pm:
        lvl = jparse(pm["DELAY"], -2**31, 2**31 - 1)
        if lvl is None:
            stop = f"DELAY {pm['DELAY']!r} is not an int"
        else:
            table = delay_table(delay or DEFAULT_DELAY)
            lvl = min(lvl, len(table))
            if lvl > 0:
                code = r.store_ts + table[lvl - 1]
    if "INNER_NUM" in pm and "INNER_BASE" in pm:
        if jparse(pm["INNER_BASE"], LONG_MIN, LONG_MAX) is None or jparse(pm["INNER_NUM"], -2**15, 2**15 - 1) is None:
            stop = stop or "INNER_NUM/INNER_BASE do not parse"
    return {"topic": topic, "props": pm, "tagsCode": code, "stop": stop}


class ModelQueue:
    """One queue as §5 says it is written (put), and as §6 says a restarted broker reads it (restart, get)."""

    def __init__(self, fs: int):
        self.fs = fs
        self.files: list[list] = []  # [fromOffset, bytearray, wrote]
        self.max_phy = -1

    def put(self, q: int, phy: int, size: int, tags: int) -> tuple[str, int | None]:
        if phy + size <= self.max_phy:
            return "dropped:step1", None
        expect = q * UNIT
        if not self.files:
            self.files.append([expect - expect % self.fs, bytearray(self.fs), 0])
        elif self.files[-1][2] == self.fs:
            self.files.append([self.files[-1][0] + self.fs, bytearray(self.fs), 0])
        f = self.files[-1]
        if len(self.files) == 1 and q != 0 and f[2] == 0:
            for i in range(0, expect % self.fs, UNIT):
                f[1][i:i + UNIT] = BLANK_UNIT
            f[2] = expect % self.fs
        kind = "appended"
        if q != 0:
            cur = f[0] + f[2]
            if expect < cur:
                return "dropped:step4", None
            if expect != cur:
                kind = "appended:gap"
        elif len(self.files) > 1 or f[2] > 0:
            kind = "appended:zero"
        f[1][f[2]:f[2] + UNIT] = struct.pack(">qiq", phy, size, tags)
        slot = (f[0] + f[2]) // UNIT
        f[2] += UNIT
        self.max_phy = phy + size
        return kind, slot

    def restart(self, min_phy: int, exact: bool) -> None:
        """Slots readable after a restart and the minimum: the spec's §6 text, or (exact) correctMinOffset."""
        self.max = (self.files[-1][0] + self.files[-1][2]) // UNIT if self.files else 0
        self.min_logic = 0
        if not self.files:
            return
        last = self.files[-1]
        if last[2] >= UNIT:
            lastphy = struct.unpack_from(">q", last[1], last[2] - UNIT)[0]
        elif exact:  # the last file is empty: correctMinOffset reads its slot -1 and throws
            raise ValueError("selectMappedBuffer(-20, 20) of an empty last file")
        else:  # the spec does not say
            lastphy = None
        if lastphy is not None and lastphy < min_phy:
            self.min_logic = self.max * UNIT
            return
        f0 = self.files[0]
        offs = [struct.unpack_from(">q", f0[1], i)[0] for i in range(0, f0[2], UNIT)]
        if not exact:
            for i, o in enumerate(offs):
                if o >= min_phy:
                    self.min_logic = f0[0] + i * UNIT
                    return
            return  # none in the first file: the spec does not say; the minimum stays 0
        # ConsumeQueue.correctMinOffset, minLogicOffset starting at 0 (a fresh load)
        start = 0 - f0[0]
        intact = start >= 0
        start = max(start, 0)
        if start > f0[2] or f0[2] - start == 0:
            return
        o = offs[start // UNIT:]
        if intact and o[0] >= min_phy:
            return
        low, high = 0, (len(o) - 1) * UNIT
        while high - low > UNIT:
            mid = (low + high) // 2 // UNIT * UNIT
            v = o[mid // UNIT]
            if v > min_phy:
                high = mid
            elif v == min_phy:
                low = high = mid
                break
            else:
                low = mid
        for i in range(low, high + 1, UNIT):
            if o[i // UNIT] >= min_phy:
                self.min_logic = f0[0] + start + i
                break

    def get(self, x: int, exact: bool):
        """ConsumeQueue.get(x) (exact), or §6 read literally: nothing for a negative x or x >= max."""
        if not exact and not 0 <= x < self.max:
            return None
        off = (x * UNIT) & 0xFFFFFFFFFFFFFFFF
        off = off - (1 << 64) if off >> 63 else off  # Java long arithmetic: x * 20 may wrap
        if off < self.min_logic or not self.files:
            return None
        if off < self.files[0][0] or off >= self.files[-1][0] + self.fs:
            return None
        f = self.files[(off - self.files[0][0]) // self.fs]
        pos = off % self.fs
        if pos >= f[2]:
            return None
        phy, size, tags = struct.unpack_from(">qiq", f[1], pos)
        return {"phyOffset": phy, "size": size, "tagsCode": tags}


# ----------------------------------------------------------------------------------------------------
# Oracle

class OracleError(RuntimeError):
    def __init__(self, cls: str, stderr: str):
        super().__init__(f"{cls} failed:\n{stderr}")
        self.stderr = stderr

    def summary(self) -> str:
        """The exception and the first RocketMQ frame, e.g. 'java.lang.IllegalArgumentException: ... at
        org.apache.rocketmq.store.ConsumeQueue.correctMinOffset(ConsumeQueue.java:129)'."""
        lines = [l.strip() for l in self.stderr.splitlines()]
        exc = next((l.split('" ', 1)[-1] for l in lines if l.startswith("Exception in thread")),
                   lines[0] if lines else "")
        frames = [l[3:] for l in lines if l.startswith("at org.apache.rocketmq.")]
        return exc + (f" at {frames[0]}" if frames else "") + (f" from {frames[-1]}" if len(frames) > 1 else "")


class Oracle:
    def __init__(self, cp: str, work: Path):
        self.cp = cp
        self.work = work
        classes = work / "helper-classes"
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-cp", cp, "-d", str(classes), str(HELPER)], check=True)
        self.cp_helper = cp + os.pathsep + str(classes)

    def java(self, cls: str, args: list[str], delay: str | None, log: bool = False) -> subprocess.CompletedProcess:
        cmd = ["java", "-cp", self.cp_helper, "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"]
        if delay:
            cmd.append(f"-Doracle.messageDelayLevel={delay}")
        if log:
            cmd.append("-Doracle.log=warn")
        env = dict(os.environ, LC_ALL="C.UTF-8", LANG="C.UTF-8")
        p = subprocess.run(cmd + [cls] + args, capture_output=True, env=env)
        if p.returncode != 0:
            raise OracleError(cls, p.stderr.decode(errors="replace"))
        return p


def hexs(s: str) -> str:
    return s.encode("utf-8").hex()


def write_case(case: Case, out: Path, oracle: Oracle | None, allow_diff: bool) -> list[str]:
    """Write one case. Returns where the spec's text (the model with §6 read literally) and the oracle disagree;
    raises where the exact model (correctMinOffset's steps) and the oracle disagree, unless allow_diff."""
    diffs: list[str] = []  # the exact model against the oracle: must be empty
    notes: list[str] = []  # the spec's §6 text against the oracle
    segs = layout(case.recs, case.seg_size, case.base)
    stop_at = next((i for i, r in enumerate(case.recs) if case.expect_stop and r.label == case.expect_stop), None)
    cdir = out / case.name
    tmp_case = Path(tempfile.mkdtemp(prefix=f"cqspec-{case.name}-"))
    try:
        cl = tmp_case / "commitlog"
        cl.mkdir()
        for name, data in segs.items():
            (cl / name).write_bytes(data)
        case_json = {
            "name": case.name,
            "description": case.description,
            "rules": list(dict.fromkeys(re.match(r"§\d+(?: step \d+)?", r).group(0) for r in case.rules)),
            "pins": case.rules,
            "mappedFileSizeConsumeQueue": CQ_FILE_SIZE,
            "segmentSize": case.seg_size,
            "firstSegmentOffset": case.base,
            "messageDelayLevel": case.delay or DEFAULT_DELAY,
            "messageDelayLevelIsDefault": case.delay is None,
            "records": len(case.recs),
            "seed": SEED,
            "generator": "tests/cq_spec_cases.py",  # as the reference data recorded it (the file is in tests/support/ now)
            "rocketmqCommit": ROCKETMQ_COMMIT,
            "notes": case.notes,
        }
        if case.delay:
            case_json["brokerConf"] = "broker.conf"
        (tmp_case / "case.json").write_text(json.dumps(case_json, indent=2, ensure_ascii=False) + "\n")
        if case.delay:
            (tmp_case / "broker.conf").write_text(
                "# The broker configuration this case stands for (only what differs from the defaults).\n"
                f"messageDelayLevel={case.delay}\n"
                f"mappedFileSizeConsumeQueue={CQ_FILE_SIZE}\n"
                f"mappedFileSizeCommitLog={case.seg_size}\n")
        if oracle is None:
            _replace(cdir, tmp_case, keep_expected=True)
            return diffs

        # 1. what the oracle reads
        work = oracle.work / case.name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        scan = oracle.java("oracle.CqSpecScan", [str(cl)], case.delay).stdout.decode("utf-8").splitlines()
        recs_read = [l.split("\t") for l in scan if l.startswith("rec\t")]
        end = [l.split("\t") for l in scan if l.startswith("end\t")][0]
        n_valid = stop_at if stop_at is not None else len(case.recs)
        if len(recs_read) != n_valid:
            raise RuntimeError(f"{case.name}: the oracle read {len(recs_read)} records, intended {n_valid}; {end}")
        if stop_at is not None:
            want = case.recs[stop_at]
            if f"(abs {want.pos})" not in end[4]:
                raise RuntimeError(f"{case.name}: reading stopped at {end[4]}, intended at {want.pos}")
        models = []
        for r, got in zip(case.recs, recs_read):
            m = model_record(r, case.delay)
            models.append(m)
            intended = [hexs(m["topic"]), str(r.qid), str(r.qoff), str(r.stored_phy), str(r.size)]
            if got[1:6] != intended:
                raise RuntimeError(f"{case.name}: record at {r.pos} read as {got[1:6]}, intended {intended}")
            if int(got[8]) & 0xFFFFFFFF != r.sys:
                raise RuntimeError(f"{case.name}: sysFlag at {r.pos} read as {got[8]}")
            if int(got[6]) != m["tagsCode"]:
                diffs.append(f"{case.name}: record at {r.pos} ({r.note}): tagsCode oracle {got[6]}, spec model "
                             f"{m['tagsCode']}")
            if m["stop"]:
                diffs.append(f"{case.name}: record at {r.pos}: spec model stops ({m['stop']}), oracle read it")
        if stop_at is not None:
            m = model_record(case.recs[stop_at], case.delay)
            if not m["stop"]:
                diffs.append(f"{case.name}: oracle stopped at {case.recs[stop_at].pos}, spec model would not")

        # 2. the ConsumeQueues, as RocketMQ writes them
        cq = work / "cq"
        build = oracle.java("oracle.ConsumeQueueBuild", [str(cl), str(cq), str(CQ_FILE_SIZE)], case.delay, log=True)
        build_line = build.stdout.decode().strip().splitlines()[-1]
        log = build.stderr.decode("utf-8", "replace").splitlines()
        stop_text = build_line.split(" stop: ", 1)[1]
        counters = dict(kv.split("=", 1) for kv in build_line.split(" stop: ")[0].split() if "=" in kv)

        # 3. the model's queues
        mqueues: dict[tuple[str, int], ModelQueue] = {}
        outcomes = []
        for r, m in zip(case.recs[:n_valid], models):
            tx = r.sys & L.SYSFLAG_TX_MASK
            if tx in (L.SYSFLAG_TX_PREPARED, L.SYSFLAG_TX_ROLLBACK):
                outcomes.append(("skipped:" + ("prepared" if tx == L.SYSFLAG_TX_PREPARED else "rollback"), None))
                continue
            mq = mqueues.setdefault((m["topic"], r.qid), ModelQueue(CQ_FILE_SIZE))
            outcomes.append(mq.put(r.qoff, r.stored_phy, r.size, m["tagsCode"]))
        got_files = {str(p.relative_to(cq)): p.read_bytes() for p in sorted(cq.rglob("*")) if p.is_file()}
        model_files = {}
        for (t, qid), mq in mqueues.items():
            for f in mq.files:
                model_files[f"{t}/{qid}/{f[0]:020d}"] = bytes(f[1])
        for k in sorted(set(got_files) | set(model_files)):
            if got_files.get(k) != model_files.get(k):
                diffs.append(f"{case.name}: queue file {k}: oracle {'absent' if k not in got_files else 'differs'}"
                             f"{'' if k in model_files else ', model has none'}")
        stop_log = [l for i, l in enumerate(log) if l.startswith("[ERROR]")
                    or (l.startswith("java.") and i > 0 and log[i - 1].startswith("[ERROR]"))]
        n_step4 = sum(1 for l in log if "Build consume queue repeatedly" in l)
        n_gap = sum(1 for l in log if "logic queue order maybe wrong" in l)
        m_step4 = sum(1 for o, _ in outcomes if o == "dropped:step4")
        m_gap = sum(1 for o, _ in outcomes if o == "appended:gap")
        if (n_step4, n_gap) != (m_step4, m_gap):
            diffs.append(f"{case.name}: oracle logged {n_step4} step-4 drops and {n_gap} gaps, model {m_step4}/{m_gap}")

        # 4. the restarted broker's view, one queue at a time: a queue the broker cannot load is reported
        # (manifest: restartError), not answered
        queues, failed = [], []
        for qdir in sorted((q for t in cq.iterdir() for q in t.iterdir()), key=lambda q: (q.parent.name, int(q.name))):
            one = work / "one"
            shutil.rmtree(one, ignore_errors=True)
            shutil.copytree(qdir, one / qdir.parent.name / qdir.name)
            try:
                qlines = oracle.java("oracle.ConsumeQueueRead", [str(one), str(CQ_FILE_SIZE), str(cl)], case.delay)
            except OracleError as e:
                failed.append({"topic": qdir.parent.name, "queueId": int(qdir.name), "error": e.summary()})
                continue
            for line in qlines.stdout.decode().splitlines():
                p = line.split("\t")
                if p[0] == "queue":
                    queues.append({"topic": bytes.fromhex(p[1]).decode("utf-8"), "queueId": int(p[2]),
                                   "min": int(p[3]), "max": int(p[4]), "maxPhy": int(p[5]), "files": p[6],
                                   "first": p[7], "last": p[8]})
            for f in (one / qdir.parent.name / qdir.name).iterdir():
                if f.read_bytes() != (qdir / f.name).read_bytes():
                    raise RuntimeError(f"{case.name}: recover() changed {qdir / f.name}")
        read_dir = work / "cq-read"
        read_dir.mkdir()
        for q in queues:
            shutil.copytree(cq / q["topic"] / str(q["queueId"]), read_dir / q["topic"] / str(q["queueId"]))
        lookups = make_lookups(queues, failed)
        lin = work / "lookups.tsv"
        lin.write_text("".join(f"{hexs(l['topic'])}\t{l['queueId']}\t{l['queueOffset']}\n" for l in lookups))
        aout = work / "answers.tsv"
        oracle.java("oracle.ConsumeQueueRead", [str(read_dir), str(CQ_FILE_SIZE), str(cl), str(lin), str(aout)],
                    case.delay)
        answers = aout.read_text().splitlines()
        assert len(answers) == len(lookups)
        for l, a in zip(lookups, answers):
            p = a.split("\t")
            assert (p[0], int(p[1]), int(p[2])) == (hexs(l["topic"]), l["queueId"], l["queueOffset"])
            l["answer"] = None if p[3] == "null" else {"phyOffset": int(p[3]), "size": int(p[4]), "tagsCode": int(p[5])}
        min_phy = case.base
        for exact in (False, True):
            m_failed = set()
            for (t, qid), mq in mqueues.items():
                try:
                    mq.restart(min_phy, exact)
                except ValueError:
                    m_failed.add((t, qid))
            if m_failed != {(f["topic"], f["queueId"]) for f in failed}:
                (diffs if exact else notes).append(
                    f"{case.name}: queues a restart cannot load: oracle {failed}, "
                    f"{'correctMinOffset' if exact else 'spec §6'} model {sorted(m_failed)}")
            for l in lookups:
                mq = mqueues.get((l["topic"], l["queueId"]))
                want = mq.get(l["queueOffset"], exact) if mq else None
                if want != l["answer"]:
                    (diffs if exact else notes).append(
                        f"{case.name}: lookup {l['topic']}/{l['queueId']}@{l['queueOffset']} ({l['kind']}): "
                        f"oracle {l['answer']}, {'correctMinOffset' if exact else 'spec §6'} model {want}")
        label_kinds(lookups, queues, cq)
        main_l = [l for l in lookups if not l["kind"].startswith("overflow")]
        over_l = [l for l in lookups if l["kind"].startswith("overflow")]

        # 5. write expected/
        exp = tmp_case / "expected"
        exp.mkdir()
        shutil.copytree(cq, exp / "consumequeue")
        with open(exp / "cq-lookups.jsonl", "w", encoding="utf-8") as f:
            for l in main_l:
                f.write(json.dumps({k: l[k] for k in ("topic", "queueId", "queueOffset", "answer", "kind")},
                                   ensure_ascii=False) + "\n")
        with open(exp / "cq-lookups-overflow.jsonl", "w", encoding="utf-8") as f:
            for l in over_l:
                f.write(json.dumps({k: l[k] for k in ("topic", "queueId", "queueOffset", "answer", "kind")},
                                   ensure_ascii=False) + "\n")
        manifest = make_manifest(case, segs, counters, (stop_text, stop_log), n_valid, queues, failed, cq, main_l,
                                 over_l, outcomes, n_step4, n_gap)
        (exp / "cq-manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
        write_messages(tmp_case / "messages.jsonl", case.recs[:n_valid], models, recs_read, outcomes,
                       exact_outcomes=not any(d for d in diffs if "queue file" in d or "logged" in d))
        if diffs:
            print("\n".join(diffs))
            if not allow_diff:
                raise RuntimeError(f"{case.name}: the model and the oracle disagree (--allow-model-diff to write)")
        _replace(cdir, tmp_case, keep_expected=False)
        return notes + diffs
    finally:
        shutil.rmtree(tmp_case, ignore_errors=True)


def _replace(cdir: Path, tmp_case: Path, keep_expected: bool) -> None:
    if cdir.exists():
        for p in cdir.iterdir():
            if keep_expected and p.name in ("expected", "messages.jsonl"):
                continue
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    cdir.mkdir(parents=True, exist_ok=True)
    for p in tmp_case.iterdir():
        shutil.move(str(p), str(cdir / p.name))


def make_lookups(queues: list[dict], failed: list[dict]) -> list[dict]:
    out = []
    fs_slots = CQ_FILE_SIZE // UNIT

    def add(t, q, o, kind):
        out.append({"topic": t, "queueId": q, "queueOffset": o, "kind": kind})

    for q in queues:
        t, qid, mx = q["topic"], q["queueId"], q["max"]
        for s in range(mx):
            add(t, qid, s, "slot")
        add(t, qid, -1, "out:negative")
        add(t, qid, -fs_slots, "out:negative")
        add(t, qid, mx, "out:max")
        add(t, qid, mx + 1, "out:past-max")
        add(t, qid, (mx // fs_slots + 1) * fs_slots, "out:next-file")
        add(t, qid, 10**12 + qid, "out:huge")
        # Java computes queueOffset * 20 in 64 bits: these wrap around (see the README)
        for o in (LONG_MIN, LONG_MIN + 1, -2**62 + 2, 2**62, 2**62 + q["min"], 2**62 + max(mx - 1, 0), 2**62 + mx,
                  461168601842738791):
            add(t, qid, o, "overflow")
    topics = sorted({q["topic"] for q in queues})
    for t in topics:
        ids = {q["queueId"] for q in queues + failed if q["topic"] == t}
        add(t, max(ids) + 1, 0, "absent:queue")
        add(t, max(ids) + 7, 3, "absent:queue")
    add("NoSuchTopic", 0, 0, "absent:topic")
    add(topics[0] + "_absent", 0, 1, "absent:topic")
    return out


def label_kinds(lookups: list[dict], queues: list[dict], cq: Path) -> None:
    """Informational kinds for the per-slot lookups: no-file, below-min, blank, gap-shifted or plain."""
    by = {(q["topic"], q["queueId"]): q for q in queues}
    for l in lookups:
        if l["kind"] != "slot":
            continue
        q = by[(l["topic"], l["queueId"])]
        s = l["queueOffset"]
        fname = cq / l["topic"] / str(l["queueId"]) / f"{s * UNIT // CQ_FILE_SIZE * CQ_FILE_SIZE:020d}"
        if not fname.exists():
            l["kind"] = "slot:no-file"
            continue
        unit = fname.read_bytes()[s * UNIT % CQ_FILE_SIZE:][:UNIT]
        blank = unit == BLANK_UNIT
        if s < q["min"]:
            l["kind"] = "slot:below-min" + (":blank" if blank else "")
        elif blank:
            l["kind"] = "slot:blank"


def make_manifest(case, segs, counters, stop_text, n_valid, queues, failed, cq, lookups, over, outcomes, n4,
                  ngap) -> dict:
    qs = []
    tot_files = tot_slots = tot_blank = 0
    rows = [(q["topic"], q["queueId"], q) for q in queues] + [(f["topic"], f["queueId"], f) for f in failed]
    for topic, qid, q in sorted(rows, key=lambda r: (r[0], r[1])):
        qdir = cq / topic / str(qid)
        files = []
        for p in sorted(qdir.iterdir()):
            data = p.read_bytes()
            n = next((i for i in range(len(data) // UNIT) if data[i * UNIT:(i + 1) * UNIT] == bytes(UNIT)),
                     len(data) // UNIT)  # written slots: an entry is never all zeros (size > 0)
            blanks = sum(1 for i in range(n) if data[i * UNIT:(i + 1) * UNIT] == BLANK_UNIT)
            files.append({"name": p.name, "fileFromOffset": int(p.name), "entries": n, "blanks": blanks,
                          "size": len(data)})
            tot_slots += n
            tot_blank += blanks
        tot_files += len(files)
        slots = sum(f["entries"] for f in files)
        row = {"topic": topic, "queueId": qid, "dir": f"consumequeue/{topic}/{qid}", "files": files, "slots": slots,
               "blanks": sum(f["blanks"] for f in files), "entries": slots - sum(f["blanks"] for f in files)}
        if "error" in q:
            row.update({"minQueueOffset": None, "maxQueueOffset": None, "maxOffsetInQueue": None,
                        "firstPhysicalOffset": None, "lastPhysicalOffset": None, "maxPhysicOffset": None,
                        "restartError": q["error"]})
        else:
            wrote = {f.split(":")[0]: int(f.split(":")[2]) for f in q["files"].split(",") if f}
            assert all(wrote[f["name"]] == f["entries"] * UNIT for f in files), (topic, qid, wrote)
            row.update({"minQueueOffset": q["min"], "maxQueueOffset": q["max"] - 1, "maxOffsetInQueue": q["max"],
                        "firstPhysicalOffset": None if q["first"] == "null" else int(q["first"].split(":")[0]),
                        "lastPhysicalOffset": None if q["last"] == "null" else int(q["last"].split(":")[0]),
                        "maxPhysicOffset": q["maxPhy"]})
        qs.append(row)
    kinds: dict[str, int] = {}
    for l in lookups:
        kinds[l["kind"]] = kinds.get(l["kind"], 0) + 1
    out_counts: dict[str, int] = {}
    for o, _ in outcomes:
        out_counts[o] = out_counts.get(o, 0) + 1
    return {
        "case": case.name,
        "set": "cq-spec",
        "commitlog": "commitlog",
        "segments": list(segs),
        "minPhyOffset": case.base,
        "rocketmqCommit": ROCKETMQ_COMMIT,
        "mappedFileSizeConsumeQueue": CQ_FILE_SIZE,
        "unitSize": UNIT,
        "entriesPerFile": CQ_FILE_SIZE // UNIT,
        "messageDelayLevel": case.delay or DEFAULT_DELAY,
        "parse": {"records": n_valid, "stop": stop_text[0], "stopLog": stop_text[1]},
        "dispatch": {"dispatched": int(counters["put"]), "skippedPrepared": int(counters["prepared"]),
                     "skippedRollback": int(counters["rollback"]),
                     "loggedRepeatedly": n4, "loggedOrderMaybeWrong": ngap,
                     "outcomes": dict(sorted(out_counts.items()))},
        "totals": {"queues": len(qs), "files": tot_files, "slots": tot_slots, "blanks": tot_blank,
                   "entries": tot_slots - tot_blank, "bytes": tot_files * CQ_FILE_SIZE},
        "queues": qs,
        "lookups": {"count": len(lookups), "nonNull": sum(1 for l in lookups if l["answer"] is not None),
                    "byKind": dict(sorted(kinds.items())),
                    "overflowFile": "cq-lookups-overflow.jsonl", "overflowCount": len(over),
                    "overflowNonNull": sum(1 for l in over if l["answer"] is not None)},
    }


def host(b: bytes) -> str:
    if len(b) == 8:
        return f"{b[0]}.{b[1]}.{b[2]}.{b[3]}:{struct.unpack('>i', b[4:])[0]}"
    a = b[:16].hex()
    return "[" + ":".join(a[i:i + 4] for i in range(0, 32, 4)) + f"]:{struct.unpack('>i', b[16:])[0]}"


def write_messages(path: Path, recs, models, read, outcomes, exact_outcomes: bool) -> None:
    tx_names = {0: "not", 4: "prepared", 8: "commit", 12: "rollback"}
    with open(path, "w", encoding="utf-8") as f:
        for r, m, got, (outcome, slot) in zip(recs, models, read, outcomes):
            body = r.body or b""
            sysf = r.sys - (1 << 32) if r.sys & 0x80000000 else r.sys
            row = {
                "physicalOffset": r.stored_phy, "size": r.size, "segment": r.segment, "segmentOffset": r.seg_off,
                "position": r.pos,
                "magic": "v2" if (r.v2 if r.v2 is not None else len(r.topic) > 127) else "v1",
                "topic": m["topic"], "queueId": r.qid, "queueOffset": r.qoff,
                "storeTimestamp": r.store_ts, "bornTimestamp": r.born_ts, "sysFlag": sysf,
                "tranType": tx_names[r.sys & 0xC], "flag": 0,
                "bornHost": host(BORN6 if r.sys & L.SYSFLAG_BORNHOST_V6 else BORN4),
                "storeHost": host(STORE6 if r.sys & L.SYSFLAG_STOREHOST_V6 else STORE4),
                "reconsumeTimes": 0, "preparedTransactionOffset": 0, "bodyLength": len(body),
                "bodyCRC": zlib.crc32(body) & 0x7FFFFFFF,
                "keys": m["props"].get("KEYS"), "uniqKey": m["props"].get("UNIQ_KEY"), "tags": m["props"].get("TAGS"),
                "properties": dict(sorted(m["props"].items())),
                "tagsCode": int(got[6]),
                "cqOutcome": outcome if exact_outcomes else None,
                "cqSlot": slot if exact_outcomes else None,
                "note": r.note,
            }
            if r.topic != m["topic"].encode("utf-8"):
                row["topicHex"] = r.topic.hex()  # the stored bytes, where they are not the topic's UTF-8
            f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    ap.add_argument("--cp", help="the oracle's classpath, or the cp.txt file build.sh wrote "
                    "(default: $ORACLE_CP, else ${ORACLE_BUILD:-/tmp/oracle-build}/cp.txt)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--commitlogs-only", action="store_true", help="write CommitLogs and case.json, keep expected/")
    ap.add_argument("--check", action="store_true",
                    help="regenerate the CommitLogs and case.json in a temp dir and compare with --out (no Java)")
    ap.add_argument("--allow-model-diff", action="store_true",
                    help="write the oracle's data even where the exact model disagrees (differences are printed)")
    ap.add_argument("-v", "--verbose", action="store_true", help="show more of the differences")
    a = ap.parse_args(argv)
    cases = [c for c in all_cases() if not a.cases or c.name in a.cases]
    if a.check:
        tmp = Path(tempfile.mkdtemp(prefix="cqspec-check-"))
        bad = 0
        try:
            for c in cases:
                write_case(c, tmp, None, False)
                new, old = tmp / c.name, a.out / c.name
                names = {str(p.relative_to(new)) for p in new.rglob("*") if p.is_file()}
                names |= {str(p.relative_to(old)) for p in old.rglob("*") if p.is_file()
                          and p.parts[len(old.parts)] not in ("expected", "messages.jsonl")}
                same = all((new / n).is_file() and (old / n).is_file()
                           and (new / n).read_bytes() == (old / n).read_bytes() for n in names)
                print(f"{c.name:40} commitlog, case.json{', broker.conf' if c.delay else ''}: "
                      f"{'same' if same else 'DIFFER'}")
                bad += not same
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return 1 if bad else 0
    oracle = None
    if not a.commitlogs_only:
        cp = a.cp or os.environ.get("ORACLE_CP") or str(
            Path(os.environ.get("ORACLE_BUILD", "/tmp/oracle-build")) / "cp.txt")
        if Path(cp).is_file():
            cp = Path(cp).read_text().strip()
        oracle = Oracle(cp, Path(tempfile.mkdtemp(prefix="cqspec-oracle-")))
    all_diffs = []
    try:
        for c in cases:
            d = write_case(c, a.out, oracle, a.allow_model_diff)
            all_diffs += d
            print(f"{c.name:40} {len(c.recs):4} records  {'' if oracle else '(CommitLog only)'}"
                  f"{f'  {len(d)} differences from the spec text' if d else ''}")
    finally:
        if oracle:
            shutil.rmtree(oracle.work, ignore_errors=True)
    if all_diffs:
        print("\nwhere the spec's text (consume-queue.md §6 read literally) and the oracle disagree "
              "(README: findings):")
        shown: dict[tuple[str, str], int] = {}
        for d in all_diffs:
            key = (d.split(":")[0], "overflow" if "(overflow)" in d else "restart" if "cannot load" in d else "slot")
            shown[key] = shown.get(key, 0) + 1
            if shown[key] <= (3 if a.verbose else 1):
                print("  " + d)
        for (case, kind), n in shown.items():
            print(f"  {case}: {n} {kind} difference(s) in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
