"""The compiled kernel's body CRC and property walk against their references.

The kernel folds a body's CRC-32 with carry-less multiplies where the CPU has them (zlib for the head under 64
bytes and the tail past the last 16-byte block), and finds KEYS, UNIQ_KEY and TAGS in one walk over the
properties, with one search for ``INNER_`` gating the rest. Both must give exactly what zlib and the numpy
reference give: a wrong CRC bit anywhere in a body stops the read as a mismatch, and every record column the
reference fills is equal.
"""
from __future__ import annotations

import random
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios import Rec, lay_segment
from rocketidx.commitlog.native import native_available
from rocketidx.commitlog.readers import RangeReader
from rocketidx.commitlog.segments import Segment, SegmentRange
import rocketidx.layout as L

pytestmark = pytest.mark.skipif(not native_available(), reason="rocketidx._native is not built")


def kernel():
    from rocketidx import _native
    return _native


def test_crc32_equals_zlib_at_every_short_length_and_random_long_ones():
    rng = random.Random(35)
    data = rng.randbytes(1 << 18)
    lengths = list(range(0, 400)) + [rng.randrange(400, 200_000) for _ in range(400)]
    for n in lengths:
        at = rng.randrange(0, 64)  # unaligned starts too
        chunk = data[at:at + n]
        assert kernel().crc32(chunk) == zlib.crc32(chunk), (at, n)


def test_crc32_of_zeros_ones_and_a_memoryview():
    for n in (64, 65, 127, 128, 4096, 4111):
        for fill in (b"\0", b"\xff", b"\x80"):
            assert kernel().crc32(fill * n) == zlib.crc32(fill * n)
    big = bytes(range(256)) * 40
    assert kernel().crc32(memoryview(big)[3:-5]) == zlib.crc32(big[3:-5])


@pytest.mark.parametrize("size", [64, 100, 1000, 4099])
def test_a_flipped_body_bit_anywhere_is_a_crc_mismatch(size):
    rng = random.Random(size)
    body = rng.randbytes(size)
    for at in sorted({0, 15, 16, 63, 64, size // 2, size - 17, size - 16, size - 1}):
        if not 0 <= at < size:
            continue
        bad = bytearray(body)
        bad[at] ^= 1 << rng.randrange(8)
        rec = Rec(body=bytes(bad), body_crc=zlib.crc32(body) & 0x7FFFFFFF)
        laid = lay_segment([rec], size=8192)
        seg = Segment(f"/nowhere/{laid.name}", 0, 8192)
        for native in (False, True):
            reader = RangeReader(laid.data, SegmentRange(seg, 0, 8192), native=native)
            assert sum(len(r) for r in reader.record_chunks()) == 0
            assert reader.stop.kind == "corrupt" and "CRC" in reader.stop.reason, (native, at, reader.stop)


NAMES = [b"KEYS", b"UNIQ_KEY", b"TAGS", b"INNER_NUM", b"INNER_BASE", b"INNER_MULTI_DISPATCH",
         b"INNER_MULTI_QUEUE_OFFSET", b"XINNER_NUM", b"KEY", b"TAG", b"a", b""]
VALUES = st.one_of(st.sampled_from([b"", b"k1 k2", b"7", b"-3", b"q1,q2", b"INNER_NUM\x01", b"\x01x"]),
                   st.binary(max_size=6).filter(lambda v: b"\x02" not in v))


@st.composite
def property_text(draw) -> bytes:
    pieces = draw(st.lists(st.tuples(st.sampled_from(NAMES), VALUES), max_size=7))
    text = b"\x02".join(n + b"\x01" + v for n, v in pieces)
    return text + draw(st.sampled_from([b"", b"\x02", b"\x02\x02", b"tail"]))


@settings(max_examples=300)
@given(text=property_text())
def test_the_property_walk_equals_the_reference_and_the_inner_flags_are_substring_tests(text):
    rec = Rec(topic=b"T", body=b"b" * 70, properties=text)
    laid = lay_segment([rec], size=2048)
    seg = Segment(f"/nowhere/{laid.name}", 0, 2048)
    got, stops = [], []
    for native in (False, True):
        reader = RangeReader(laid.data, SegmentRange(seg, 0, 2048), native=native)
        got.append([r for r in reader.record_chunks() if len(r)])
        stops.append((reader.stop.segment_offset, reader.stop.kind, reader.stop.reason))
    assert stops[0] == stops[1]
    if not got[0]:  # a value Java's parse rejects (INNER_BASE, INNER_NUM): the record is invalid on both
        assert not got[1]
        return
    ref, nat = np.concatenate(got[0]), np.concatenate(got[1])
    assert len(ref) == len(nat) == 1
    assert (ref[:, :L.REC_TAGS_CODE] == nat[:, :L.REC_TAGS_CODE]).all()
    # What the dispatch is told to parse: a plain substring search, as before the walk was fused.
    assert nat[0, L.REC_MULTI_DISPATCH] == (b"INNER_MULTI_DISPATCH\x01" in text)
    assert (nat[0, L.REC_INNER_NUM_POS] >= 0) <= (b"INNER_NUM\x01" in text)


@pytest.mark.parametrize("cut", [0, 1, 9, 95])
def test_scans_in_small_chunks_to_a_segment_that_ends_in_a_record_equal_the_reference(cut):
    """The kernel fetches records a few ahead (a second walk of the sizes) and hands each full chunk over
    whole: records that run to the buffer's last byte, or a torn one there, read as the reference reads them,
    and no chunk shares memory with another."""
    rng = random.Random(cut)
    recs = [Rec(topic=b"T%d" % (i % 3), body=rng.randbytes(rng.randrange(1, 900)),
                properties=b"KEYS\x01k%d\x02TAGS\x01t" % i) for i in range(60)]
    laid = lay_segment(recs, size=60 * 1200)
    end = laid.offsets[-1] + len(recs[-1].encode(laid.offsets[-1])) - cut  # the buffer ends in (or at) the last
    data = bytes(laid.data[:end])
    seg = Segment(f"/nowhere/{laid.name}", 0, end)
    got, stops = [], []
    for native in (False, True):
        reader = RangeReader(data, SegmentRange(seg, 0, end), native=native, batch_records=16)
        chunks = [r for r in reader.record_chunks() if len(r)]
        assert not any(np.shares_memory(a, b) for i, a in enumerate(chunks) for b in chunks[i + 1:])
        got.append(np.concatenate(chunks))
        stops.append((reader.stop.segment_offset, reader.stop.kind))
    assert stops[0] == stops[1]
    assert len(got[1]) == (60 if cut == 0 else 59)
    assert (got[0][:, :L.REC_TAGS_CODE] == got[1][:, :L.REC_TAGS_CODE]).all()
