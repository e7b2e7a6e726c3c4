"""Byte-range splits of a segment read back the whole segment's records.

RangeReader reads the records that START in ``[start, end)``; a range not starting at 0 resynchronises
on the first well-formed record whose PHYSICALOFFSET equals its own position. For a clean segment the
ranges in order give exactly the whole segment's records, for any split points. A range cannot see an
invalid record that lies before it, so the caller stitches: a range's records count only when its first
record starts where the previous range's scan stopped (``stop.segment_offset``), and nothing counts after a
final stop. :func:`stitch` is that rule; with it, any split of any segment (corrupt ones included) gives
the whole segment's records.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refdata import GOLDEN
from scenarios import (BASIC, IPV6_BORN, IPV6_STORE, MAGIC_V2, SCENARIOS, Expect, Rec, Scenario, Seg,
                       lay_segment, props)
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.commitlog.native import native_available
from rocketidx.commitlog.readers import RangeReader
from rocketidx.commitlog.segments import Segment, SegmentRange, list_segments

GOLDEN_SEGMENTS = sorted(str(p) for p in GOLDEN.glob("*/commitlog/*"))
NATIVES = [False, True] if native_available() else [False]


@dataclass(frozen=True)
class Part:
    rows: tuple[dict, ...]
    stop_kind: str
    stop_offset: int
    final: bool


def read_part(data: bytes, seg: Segment, start: int, end: int, native: bool, full: bool = True) -> Part:
    """The records starting in [start, end): whole rows, or (full=False) just their offsets."""
    reader = RangeReader(data, SegmentRange(seg, start, end), native=native)
    if full:
        rows = tuple(r for batch in reader for r in batch.to_pylist())
    else:
        rows = tuple(r for batch in reader
                     for r in batch.select(["segment_offset", "phy_offset"]).to_pylist())
    return Part(rows, reader.stop.kind, reader.stop.segment_offset, reader.stop.final)


def read_split(data: bytes, seg: Segment, cuts: list[int], native: bool, full: bool = True) -> list[Part]:
    bounds = [0] + sorted(cuts) + [seg.size]
    return [read_part(data, seg, a, b, native, full) for a, b in zip(bounds, bounds[1:]) if a < b]


def stitch(parts: list[Part]) -> list[dict]:
    """The caller's rule: keep a range's records only if they continue the previous range's walk."""
    out: list[dict] = []
    expect_next = 0
    for p in parts:
        if p.rows:
            if p.rows[0]["segment_offset"] != expect_next:
                break  # something no range could read lies between: an invalid record
            out.extend(p.rows)
            expect_next = p.stop_offset
        if p.final or p.stop_kind == "blank":
            break
    return out


def union(parts: list[Part]) -> list[dict]:
    return [r for p in parts for r in p.rows]


@functools.lru_cache(maxsize=None)
def golden_segment(path: str) -> tuple[bytes, Segment]:
    data = open(path, "rb").read()
    return data, Segment(path, int(os.path.basename(path)), len(data))


@functools.lru_cache(maxsize=None)
def whole(path: str, native: bool, full: bool = True) -> Part:
    data, seg = golden_segment(path)
    return read_part(data, seg, 0, seg.size, native, full)


# --- golden segments -------------------------------------------------------------------------------

@pytest.mark.parametrize("native", NATIVES, ids=lambda n: "native" if n else "numpy")
@settings(max_examples=60)
@given(data=st.data())
def test_two_ranges_of_a_golden_segment_give_the_whole_segment_records(native, data):
    path = data.draw(st.sampled_from(GOLDEN_SEGMENTS), label="segment")
    buf, seg = golden_segment(path)
    ref = whole(path, native, False)
    starts = [r["segment_offset"] for r in ref.rows] or [0]
    k = data.draw(st.one_of(st.integers(0, seg.size),
                            st.sampled_from(starts).flatmap(lambda s: st.integers(max(0, s - 8), s + 8))),
                  label="k")
    parts = read_split(buf, seg, [min(k, seg.size)], native, full=False)
    assert stitch(parts) == list(ref.rows)
    if ref.stop_kind != "corrupt":
        assert union(parts) == list(ref.rows)


@pytest.mark.parametrize("native", NATIVES, ids=lambda n: "native" if n else "numpy")
@settings(max_examples=25)
@given(data=st.data())
def test_three_ranges_of_a_golden_segment_give_the_whole_rows(native, data):
    path = data.draw(st.sampled_from(GOLDEN_SEGMENTS), label="segment")
    buf, seg = golden_segment(path)
    ref = whole(path, native)
    cuts = data.draw(st.lists(st.integers(1, seg.size - 1), min_size=2, max_size=2, unique=True), label="cuts")
    parts = read_split(buf, seg, cuts, native)
    assert stitch(parts) == list(ref.rows)
    if ref.stop_kind != "corrupt":
        assert union(parts) == list(ref.rows)


@pytest.mark.parametrize("path", GOLDEN_SEGMENTS, ids=lambda p: p.split("/")[-3][:2] + "-" + p[-8:])
def test_split_at_every_record_start_and_just_after_it(path):
    """Deterministic sweep: k on, one byte after, and 4 bytes after every 40th record start."""
    buf, seg = golden_segment(path)
    native = NATIVES[-1]
    ref = whole(path, native, False)
    for r in ref.rows[::40]:
        for k in (r["segment_offset"], r["segment_offset"] + 1, r["segment_offset"] + 4):
            parts = read_split(buf, seg, [k], native, full=False)
            assert stitch(parts) == list(ref.rows), k


def test_range_after_a_corrupt_record_cannot_see_it_but_the_gap_shows():
    """g5's last segment has a CRC-corrupt record with valid records after it: a range starting past it
    returns those later records (it cannot know), and its first record does not continue the previous
    range's walk, which is how the caller knows to stop."""
    path = next((p for p in GOLDEN_SEGMENTS if "g5-" in p and p.endswith("00000000000000786432")), None)
    buf, seg = golden_segment(path)
    ref = whole(path, False, False)
    assert ref.stop_kind == "corrupt"
    bad = ref.stop_offset
    parts = read_split(buf, seg, [bad + 1], False, full=False)
    assert parts[0].stop_kind == "corrupt" and parts[0].stop_offset == bad
    parts = read_split(buf, seg, [bad - 1, bad + 1], False, full=False)
    assert parts[1].rows == () and parts[1].stop_kind == "corrupt"  # the corrupt record starts in it
    assert parts[2].rows and parts[2].rows[0]["segment_offset"] > bad
    assert stitch(parts) == list(ref.rows)


# --- generated stores ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def generated_segments(tmp_root: str) -> list[tuple[bytes, Segment]]:
    generate_store(tmp_root, GenConfig(messages=1500, segment_bytes=64 * 1024, body_bytes=200, seed=7,
                                       share_v2=0.2, share_ipv6=0.3, share_tx=0.2))
    return [(open(s.path, "rb").read(), s) for s in list_segments(tmp_root)]


@pytest.fixture(scope="module")
def gen_store(tmp_path_factory) -> list[tuple[bytes, Segment]]:
    return generated_segments(str(tmp_path_factory.mktemp("gen")))


@pytest.mark.parametrize("native", NATIVES, ids=lambda n: "native" if n else "numpy")
def test_any_split_of_a_generated_store_gives_the_whole_records(gen_store, native):
    @settings(max_examples=30)
    @given(data=st.data())
    def check(data):
        buf, seg = data.draw(st.sampled_from(gen_store), label="segment")
        ref = read_part(buf, seg, 0, seg.size, native, full=False)
        cuts = data.draw(st.lists(st.integers(1, seg.size - 1), min_size=1, max_size=3, unique=True))
        parts = read_split(buf, seg, cuts, native, full=False)
        assert union(parts) == list(ref.rows)
        assert stitch(parts) == list(ref.rows)
    check()


# --- random clean records built with struct.pack --------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02 "), max_size=6)


@st.composite
def random_record(draw) -> Rec:
    topic = draw(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=10)).encode()
    keys = draw(st.lists(_text, max_size=3))
    body = draw(st.binary(max_size=60))
    born6, store6, v2 = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    return Rec(topic=topic, properties=props(("KEYS", " ".join(keys)) if keys else ("TAGS", "t")), body=body,
               magic=MAGIC_V2 if v2 else BASIC.magic,
               born_host=IPV6_BORN if born6 else BASIC.born_host,
               store_host=IPV6_STORE if store6 else BASIC.store_host,
               queue_offset=draw(st.integers(0, 2**40)),
               expect=Expect(topic.decode()))


@pytest.mark.parametrize("native", NATIVES, ids=lambda n: "native" if n else "numpy")
@settings(max_examples=80)
@given(records=st.lists(random_record(), min_size=1, max_size=12), blank=st.booleans(), data=st.data())
def test_any_split_of_random_records_gives_the_whole_records(native, records, blank, data):
    laid = lay_segment(records, size=4096, base_offset=4096 * 3, blank=blank)
    seg = Segment(f"/nowhere/{laid.name}", laid.base_offset, len(laid.data))
    ref = read_part(laid.data, seg, 0, seg.size, native)
    assert [r["segment_offset"] for r in ref.rows] == list(laid.offsets)
    cuts = data.draw(st.lists(st.integers(1, laid.end + 8), min_size=1, max_size=3, unique=True))
    parts = read_split(laid.data, seg, [c for c in cuts if c < seg.size], native)
    assert union(parts) == list(ref.rows)


# --- scenarios -------------------------------------------------------------------------------------

SCENARIO_PARAMS = list(SCENARIOS)


@pytest.mark.parametrize("name", SCENARIO_PARAMS)
def test_every_split_of_a_scenario_segment_stitches_to_the_whole(name, reader_native):
    for laid in SCENARIOS[name].lay():
        seg = Segment(f"/nowhere/{laid.name}", laid.base_offset, len(laid.data))
        ref = read_part(laid.data, seg, 0, seg.size, reader_native, full=False)
        points = set()
        for off in list(laid.offsets) + [laid.end]:
            points.update(off + d for d in (-1, 0, 1, 4, 5, 29, 60))
        for k in sorted(p for p in points if 0 < p < seg.size):
            parts = read_split(laid.data, seg, [k], reader_native, full=False)
            assert stitch(parts) == list(ref.rows), k


def test_a_range_starting_inside_a_body_finds_the_next_true_record(reader_native):
    """A body holding a complete record image (magic, sizes, fields adding up) whose PHYSICALOFFSET is
    not its own position, and bare magic codes: none of them is taken for a record."""
    fake = Rec(properties=props(("KEYS", "fake"))).encode(123456)  # claims offset 123456
    body = b"\xda\xa3\x20\xa7" * 3 + fake + b"\xda\xa3\x20\xab" + fake
    first = replace(BASIC, body=body)
    second = replace(BASIC, queue_offset=8)
    laid = lay_segment([first, second], size=4096)
    seg = Segment(f"/nowhere/{laid.name}", 0, 4096)
    body_at = 48 + 8 + 8 + 8 + 4 + 8 + 4
    for k in range(1, first.true_length() + 1):
        part = read_part(laid.data, seg, k, seg.size, reader_native)
        assert [r["segment_offset"] for r in part.rows] == [laid.offsets[1]], k
    assert body_at < first.true_length()


def test_a_range_holding_no_record_start_returns_nothing(reader_native):
    big = replace(BASIC, body=bytes(range(256)) * 8)
    laid = lay_segment([big, BASIC], size=4096)
    seg = Segment(f"/nowhere/{laid.name}", 0, 4096)
    part = read_part(laid.data, seg, 100, 1000, reader_native)
    assert part.rows == () and not part.final


def test_a_range_starting_exactly_at_a_record_returns_it_first(reader_native):
    sc = Scenario("x", (Seg(tuple(replace(BASIC, queue_offset=i) for i in range(5))),))
    laid = sc.lay()[0]
    seg = Segment(f"/nowhere/{laid.name}", 0, 4096)
    for i, off in enumerate(laid.offsets):
        part = read_part(laid.data, seg, off, seg.size, reader_native)
        assert [r["queue_offset"] for r in part.rows] == list(range(i, 5))


def test_a_range_starting_at_a_valid_record_followed_by_a_bad_magic_returns_it(reader_native):
    laid = SCENARIOS["valid_record_then_bad_magic"].lay()[0]
    seg = Segment(f"/nowhere/{laid.name}", 0, 4096)
    part = read_part(laid.data, seg, laid.offsets[1], seg.size, reader_native)
    assert [r["segment_offset"] for r in part.rows] == [laid.offsets[1]]
    assert part.final and part.stop_offset == laid.offsets[2]


def test_a_range_before_a_last_record_that_ends_exactly_at_the_segment_end_returns_it(reader_native):
    """No blank record after it (rocketidx gen writes such segments, see test_generate_and_cli)."""
    laid = SCENARIOS["last_record_fills_segment"].lay()[0]
    seg = Segment(f"/nowhere/{laid.name}", 0, len(laid.data))
    part = read_part(laid.data, seg, 10, seg.size, reader_native)
    assert [r["segment_offset"] for r in part.rows] == [laid.offsets[1]]
    assert part.stop_kind == "segment_end"
