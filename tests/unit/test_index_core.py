"""The shared index-reading rules, each tested where it lives: the slot of a key hash, the item reader,
the order in which an index directory's sizes are resolved, the manifest's round trip, task packing."""
from __future__ import annotations

import numpy as np
import pytest

from rocketidx.keys import hash_to_key_hash, java_string_hash_py, key_hash_py, slot_of

INT_MIN = -2**31


# --- the slot rule ----------------------------------------------------------------------------------

def test_slot_is_the_key_hash_modulo_the_slot_count():
    assert slot_of(17, 5) == 2
    assert slot_of(0, 5) == 0
    assert slot_of(2**31 - 1, 5_000_000) == (2**31 - 1) % 5_000_000
    got = slot_of(np.array([17, 0, 4, 5, 2**31 - 1], np.int32), 5)
    assert got.tolist() == [2, 0, 4, 0, 2] and got.dtype == np.int64


def test_integer_min_value_hashes_to_key_hash_0_and_so_to_slot_0():
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE; Math.abs keeps it negative and the broker
    # then uses 0 (IndexFile.indexKeyHashMethod).
    assert java_string_hash_py("polygenelubricants") == INT_MIN
    assert key_hash_py("polygenelubricants") == 0
    assert slot_of(key_hash_py("polygenelubricants"), 7) == 0
    assert slot_of(hash_to_key_hash(np.array([INT_MIN, -7, 7], np.int32)), 5).tolist() == [0, 2, 2]


def test_a_negative_key_hash_has_no_slot():
    # Only a damaged item holds one; numpy's % would give a plausible slot (-3 % 5 == 2), Java's a
    # negative one. Both are wrong: -1 says "none".
    assert slot_of(-3, 5) == -1
    assert slot_of(INT_MIN, 5) == -1
    assert slot_of(np.array([-3, 3, INT_MIN], np.int32), 5).tolist() == [-1, 3, -1]
    assert slot_of(np.zeros(0, np.int32), 5).tolist() == []


# --- the item reader --------------------------------------------------------------------------------

def _index_file(path, hash_slot_num=3, index_num=6, items=((7, 100, 0, 0), (8, 120, 1, 0), (7, 130, 2, 1))):
    """A file built with struct, not with rocketidx.layout: header, slots, item 0, then ``items``."""
    import struct
    header = struct.pack(">qqqqii", 1000, 3000, items[0][1], items[-1][1], 2, len(items) + 1)
    slots = b"".join(struct.pack(">i", v) for v in (0, 3, 2)[:hash_slot_num])
    body = bytes(20) + b"".join(struct.pack(">iqii", *it) for it in items)
    path.write_bytes(header + slots + body + bytes(20 * index_num - len(body)))
    return path


def test_items_come_in_chunks_with_their_first_index(tmp_path):
    from rocketidx.indexfile import FileRef, iter_items, read_item_fields
    path = _index_file(tmp_path / "f")
    chunks = list(iter_items(path, 3, 1, 4, chunk=2))
    assert [a for a, _ in chunks] == [1, 3]
    assert [int(x) for _, c in chunks for x in c["phy_offset"]] == [100, 120, 130]
    cols = read_item_fields(path, 3, 0, 4, ("key_hash", "prev_index"), chunk=3)
    assert cols["key_hash"].tolist() == [0, 7, 8, 7] and cols["prev_index"].tolist() == [0, 0, 0, 1]
    assert cols["key_hash"].dtype == np.int32
    ref = FileRef(str(path), 3, 6, 2)
    assert ref.name == "f" and ref.open().header.index_count == 4
    assert [int(x) for _, c in ref.iter_items(2, 4) for x in c["key_hash"]] == [8, 7]


def test_a_file_cut_short_names_the_file_and_the_byte_where_it_ends(tmp_path):
    from rocketidx.errors import CorruptIndexError
    from rocketidx.indexfile import iter_items, iter_slots
    path = _index_file(tmp_path / "f")
    items_at = 40 + 4 * 3
    with open(path, "r+b") as f:
        f.truncate(items_at + 20 * 2 + 7)  # item 2 cut after 7 bytes
    with pytest.raises(CorruptIndexError) as e:
        list(iter_items(path, 3, 1, 4))
    assert e.value.path == str(path) and e.value.offset == items_at + 20 * 2 + 7
    with pytest.raises(CorruptIndexError) as e:
        list(iter_slots(path, 10_000))
    assert e.value.path == str(path) and e.value.offset == items_at + 20 * 2 + 7
