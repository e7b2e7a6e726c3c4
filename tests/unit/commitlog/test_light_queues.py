"""Light queues (issue 34): the units a broker with ``enableMultiDispatch`` writes for a message's
``INNER_MULTI_DISPATCH`` names, against a record-by-record model written here from the broker's code
(``checkMultiDispatchQueue`` and ``multiDispatchLmqQueue`` of 4.9.8, 5.1.1, 5.1.4 and 5.2.0+), and which
release and broker.conf give which rules."""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, strategies as st

from scenarios import Rec, lay_segment, props, write_segments

import rocketidx.layout as L
from rocketidx.commitlog.dispatch import _plain_units, dispatch, java_parse_longs, parse_longs_at
from rocketidx.commitlog.native import native_available
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import LMQ_TOPIC_RULES, LightQueues, broker_release, build_request, light_queues
from rocketidx.errors import ConfigError

PREPARED, COMMIT, ROLLBACK = L.SYSFLAG_TX_PREPARED, L.SYSFLAG_TX_COMMIT, L.SYSFLAG_TX_ROLLBACK


def java_split(value: str) -> list[str]:
    """``value.split(",")``: trailing empty strings dropped."""
    parts = value.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def java_parse_long(text: str) -> int | None:
    """``Long.parseLong``: a sign, then decimal digits as ``Character.digit`` knows them (Unicode's, of the BMP:
    a digit past it is two chars to Java, neither a digit)."""
    if not re.fullmatch(r"[+-]?\d+", text) or any(ord(c) > 0xFFFF for c in text):
        return None
    v = int(text)
    return v if -2**63 <= v < 2**63 else None


def dispatches(rule: str, topic: str) -> bool:
    """The broker's topic check, spelled out per release."""
    if rule == "none":  # 4.9.8, 5.0.0, 5.1.0: DefaultMessageStore/ConsumeQueue.checkMultiDispatchQueue
        return True
    if rule == "5.1.1":
        return not topic.startswith("%RETRY%")
    if rule == "5.1.3":
        return not (topic.startswith("%RETRY%") or topic == "rmq_sys_wheel_timer" or topic == "SCHEDULE_TOPIC_XXXX")
    if rule == "rocksdb":  # RocksDBConsumeQueueStore.dispatchLMQ: DispatchRequest.containsLMQ, topicAllowsLMQ
        return not (topic.startswith(("%RETRY%", "%DLQ%", "rmq_sys_")) or topic == "SCHEDULE_TOPIC_XXXX")
    return not (topic.startswith("%RETRY%") or topic.startswith("rmq_sys_") or topic == "SCHEDULE_TOPIC_XXXX")


def model(records: list[Rec], offsets: list[int], main_tags: dict[int, int], rules: LightQueues | None):
    """(topic, queue id, queue offset, phy offset, size, tagsCode) for every unit, in dispatch order."""
    out = []
    for rec, at in zip(records, offsets):
        if rec.tx in (PREPARED, ROLLBACK):
            continue
        size = len(rec.encode(at))
        topic = rec.topic.decode()
        out.append((topic, rec.queue_id, rec.queue_offset, at, size, main_tags[at]))
        if rules is None or not dispatches(rules.topics, topic):
            continue
        p = dict(kv.split("\x01", 1) for kv in rec.properties.decode().split("\x02") if "\x01" in kv)
        names, offs = p.get(L.PROPERTY_INNER_MULTI_DISPATCH, ""), p.get(L.PROPERTY_INNER_MULTI_QUEUE_OFFSET, "")
        if not names.strip() or not offs.strip():
            continue
        names, offs = java_split(names), java_split(offs)
        if len(names) != len(offs):
            continue
        for name, off in zip(names, offs):
            value = java_parse_long(off)
            if "/" in name or value is None:
                continue
            qid = 0 if rules.enable_lmq and name.startswith("%LMQ%") else rec.queue_id
            out.append((name, qid, value, at, size, main_tags[at]))
    return out


def rows(d) -> list[tuple]:
    return [(d.topics[int(d.topic_index[i])], int(d.queue_id[i]), int(d.queue_offset[i]), int(d.phy_offset[i]),
             int(d.size[i]), int(d.tags_code[i])) for i in range(len(d))]


def dispatched(tmp_path, records: list[Rec], rules: LightQueues | None, native: bool | None = None):
    seg = lay_segment(records, size=1 << 20)
    store = write_segments(tmp_path, [seg])
    reader = CommitLogReader(list_segments(store / "commitlog"), check_crc=False, native=native)
    got, plain = [], []
    for s, buf, recs in reader.record_chunks():
        got.append(dispatch(buf, s, recs, light_queues=rules))
        plain.append(dispatch(buf, s, recs))
    main_tags = {int(p): int(t) for d in plain for p, t in zip(d.phy_offset, d.tags_code)}
    return got, seg.offsets, main_tags


NAMES = ["%LMQ%a", "%LMQ%b", "%LMQ%c", "plain", "%LMQ%x/y", "", " ", "\u2003", "%LMQ%ü"]
# "0x1": Arrow's string cast would take it, Long.parseLong throws (the parse's fast path must not take it)
OFFSETS = ["0", "5", "17", "-1", "+7", "x", "", " 3", "0x1", "\u2003", "9223372036854775807", "9223372036854775808"]
TOPICS = ["T", "%RETRY%g", "%DLQ%g", "rmq_sys_wheel_timer", "rmq_sys_other", "SCHEDULE_TOPIC_XXXX",
          "RMQ_SYS_TRANS_HALF_TOPIC"]


@st.composite
def records(draw):
    out = []
    for i in range(draw(st.integers(1, 12))):
        pairs = [("KEYS", f"k{i}")]
        if draw(st.booleans()):
            pairs.append(("TAGS", draw(st.sampled_from(["a", "b", ""]))))
        if draw(st.integers(0, 3)):
            names = ",".join(draw(st.lists(st.sampled_from(NAMES), min_size=0, max_size=4)))
            offs = ",".join(draw(st.lists(st.sampled_from(OFFSETS), min_size=0, max_size=4)))
            tail = draw(st.sampled_from(["", ",", ",,"]))
            if draw(st.integers(0, 4)):
                pairs.append((L.PROPERTY_INNER_MULTI_DISPATCH, names + tail))
            if draw(st.integers(0, 4)):
                pairs.append((L.PROPERTY_INNER_MULTI_QUEUE_OFFSET, offs + draw(st.sampled_from(["", ","]))))
        out.append(Rec(topic=draw(st.sampled_from(TOPICS)).encode(), properties=props(*pairs),
                       queue_id=draw(st.integers(0, 3)), queue_offset=i,
                       tx=draw(st.sampled_from([0, 0, 0, PREPARED, COMMIT, ROLLBACK]))))
    return out


@pytest.mark.parametrize("rule", list(LMQ_TOPIC_RULES))
@pytest.mark.parametrize("enable_lmq", [True, False])
@given(recs=records())
def test_the_units_are_the_brokers_record_by_record(tmp_path_factory, reader_native, rule, enable_lmq, recs):
    """On both read paths: the kernel marks the records that may name light queues, the numpy path leaves
    that to the dispatch's own search."""
    rules = LightQueues(enable_lmq, rule)
    got, offsets, main_tags = dispatched(tmp_path_factory.mktemp("s"), recs, rules, reader_native)
    assert [r for d in got for r in rows(d)] == model(recs, list(offsets), main_tags, rules)


PLAIN_NAME = st.text("%LMQabcz09_-/", min_size=1, max_size=8)
PLAIN_OFFSET = st.from_regex(r"-?[0-9]{1,20}", fullmatch=True)
_PLAIN = re.compile(r"[^,]+(,[^,]+)*,*")


@st.composite
def plain_records(draw):
    """Lists the kernel splits itself (printable ASCII, no empty item), with some it must leave to Python: an
    offset of 19 or more digits, a name with a space, an empty item, lists of different lengths."""
    out = []
    for i in range(draw(st.integers(1, 10))):
        k = draw(st.integers(1, 4))
        names = draw(st.lists(PLAIN_NAME, min_size=k, max_size=k))
        offs = draw(st.lists(PLAIN_OFFSET, min_size=k, max_size=k + draw(st.sampled_from([0, 0, 0, 1]))))
        if draw(st.integers(0, 9)) == 0:
            names[-1] = draw(st.sampled_from(["a b", "", "\u00e9"]))
        pairs = [(L.PROPERTY_INNER_MULTI_DISPATCH, ",".join(names) + draw(st.sampled_from(["", ",", ",,"]))),
                 (L.PROPERTY_INNER_MULTI_QUEUE_OFFSET, ",".join(offs))]
        out.append(Rec(topic=b"T", properties=props(*pairs), queue_id=draw(st.integers(0, 3)), queue_offset=i))
    return out


@pytest.mark.skipif(not native_available(), reason="the compiled kernel is not built")
@given(recs=plain_records())
def test_the_kernel_splits_plain_lists_as_java_does(tmp_path_factory, recs):
    """The kernel's split (``light_units``) gives the model's units, and takes every plain record itself: a
    kernel that handed every record to the Python reference would pass the model test above unnoticed."""
    rules = LightQueues(True, "5.2")
    got, offsets, main_tags = dispatched(tmp_path_factory.mktemp("s"), recs, rules, True)
    assert [r for d in got for r in rows(d)] == model(recs, list(offsets), main_tags, rules)
    seg = lay_segment(recs, size=1 << 20)
    store = write_segments(tmp_path_factory.mktemp("k"), [seg])
    for s, buf, r in CommitLogReader(list_segments(store / "commitlog"), check_crc=False, native=True).record_chunks():
        u8 = np.frombuffer(buf, np.uint8, s.size)
        rr = np.arange(len(r))
        _, rest = _plain_units(u8, r, rr, rr)
        for rec, left in zip(recs, rest):
            p = dict(kv.split("\x01", 1) for kv in rec.properties.decode().split("\x02") if "\x01" in kv)
            names, offs = p[L.PROPERTY_INNER_MULTI_DISPATCH], p[L.PROPERTY_INNER_MULTI_QUEUE_OFFSET]
            plain = bool(_PLAIN.fullmatch(names) and re.fullmatch(r"(-?[0-9]{1,18})(,-?[0-9]{1,18})*", offs)
                         and " " not in names and names.isascii())
            # An empty list is no list (the property's value must not be empty): no unit, nothing left over.
            assert left == (names != "" and not plain), (names, offs)


def test_without_light_queues_nothing_changes(tmp_path):
    recs = [Rec(properties=props((L.PROPERTY_INNER_MULTI_DISPATCH, "%LMQ%a"), (L.PROPERTY_INNER_MULTI_QUEUE_OFFSET, "3")))]
    got, offsets, tags = dispatched(tmp_path, recs, None)
    assert [r for d in got for r in rows(d)] == model(recs, list(offsets), tags, None)
    assert len(got[0]) == 1 and got[0].left_out == ()


def test_a_unit_follows_its_records_own_entry_and_what_is_left_out_is_counted(tmp_path):
    both = props((L.PROPERTY_INNER_MULTI_DISPATCH, "%LMQ%a,%LMQ%x/y,%LMQ%b,%LMQ%c"),
                 (L.PROPERTY_INNER_MULTI_QUEUE_OFFSET, "4,1,nope,9"))
    recs = [Rec(topic=b"T", properties=both, queue_id=2, queue_offset=0),
            Rec(topic=b"T", properties=both, queue_id=3, queue_offset=1)]
    got, offsets, _ = dispatched(tmp_path, recs, LightQueues(True, "5.2"))
    (d,) = got
    assert [(t, q, o) for t, q, o, *_ in rows(d)] == [("T", 2, 0), ("%LMQ%a", 0, 4), ("%LMQ%c", 0, 9),
                                                     ("T", 3, 1), ("%LMQ%a", 0, 4), ("%LMQ%c", 0, 9)]
    assert dict(d.left_out) == {"light_queue_name_holds_separator": 2, "light_queue_offset_not_a_long": 2}


@pytest.mark.parametrize("version, rule", [("4.9.8", "none"), ("5.0.0", "none"), ("5.1.0", "none"),
                                           ("5.1.1", "5.1.1"), ("5.1.2", "5.1.3"), ("5.1.4", "5.1.3"),
                                           ("5.1", "5.1.3"), ("5.2.0", "5.2"), ("5.5.0", "5.2"), ("5.x", "5.2"),
                                           (None, "5.2")])
def test_each_release_has_its_rule(version, rule):
    assert broker_release(version).lmq_topics == rule


def test_the_broker_conf_turns_them_on(tmp_path):
    release = broker_release("5.5.0")
    assert light_queues({}, release) is None
    assert light_queues({"enableLmq": True}, release) is None  # enableMultiDispatch is the dispatch's switch
    assert light_queues({"enableMultiDispatch": True}, release) == LightQueues(False, "5.2")
    assert light_queues({"enableMultiDispatch": True, "enableLmq": True}, broker_release("4.9.8")) == \
        LightQueues(True, "none")
    # 5.5: double write with LMQ combined into RocksDB writes no light queue files.
    assert light_queues({"enableMultiDispatch": True, "rocksdbCQDoubleWriteEnable": True,
                         "combineCQUseRocksdbForLmq": True}, release) is None
    conf = tmp_path / "broker.conf"
    conf.write_text("enableLmq = true\nenableMultiDispatch=TRUE\n")
    request = build_request(tmp_path / "commitlog", tmp_path / "out", broker_conf=conf, broker_version="5.1.4")
    assert request.config.light_queues == LightQueues(True, "5.1.3")
    assert build_request(tmp_path / "commitlog", tmp_path / "out").config.light_queues is None


def test_an_unknown_rule_is_refused():
    with pytest.raises(ConfigError):
        LightQueues(True, "6.0")


@given(texts=st.lists(st.one_of(st.from_regex(r"[+-]?[0-9]{0,21}", fullmatch=True),
                                st.text("0123456789+- x\u0663\uff13\U0001d7d1", max_size=6)), max_size=30))
def test_offsets_parse_as_javas_long_parse_long(texts):
    """Both parses of a list of offsets (the kernel's plain one with the reference for the rest, and the
    reference alone) are Java's ``Long.parseLong``: the value, or that it throws."""
    raw = [t.encode() for t in texts]
    data = np.frombuffer(b"".join(raw) or b"\0", np.uint8)
    start = np.cumsum([0] + [len(r) for r in raw[:-1]]).astype(np.int64) if raw else np.zeros(0, np.int64)
    length = np.asarray([len(r) for r in raw], np.int64)
    want = [java_parse_long(t) for t in texts]
    for values, throws in (parse_longs_at(data, start, length),
                           java_parse_longs(pa.array(texts, pa.string()))):
        assert [None if t else int(v) for v, t in zip(values, throws)] == want
