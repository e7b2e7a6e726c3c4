"""The shared index-reading rules, each tested where it lives: the slot of a key hash, the item reader,
the order in which an index directory's sizes are resolved, the manifest's round trip, task packing."""
from __future__ import annotations

import numpy as np
import pytest

from rocketidx.commitlog.keys import hash_to_key_hash, java_string_hash_py, key_hash_py, slot_of

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
    from rocketidx.index.reader import FileRef, iter_items, read_item_fields
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
    from rocketidx.index.reader import iter_items, iter_slots
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


# --- an index directory's files and sizes -----------------------------------------------------------

FULL = tuple((7 + i, 100 + 10 * i, i, 0) for i in range(5))  # 5 items + item 0 = index_num 6: a full file


def _manifest_row(name, **kw):
    row = dict(name=name, window_id=0, window_start_ms=0, seq=0, begin_timestamp=1000, end_timestamp=3000,
               begin_phy_offset=100, end_phy_offset=130, hash_slot_count=2, index_count=4, entries=3)
    row.update(kw)
    return row


def test_sizes_come_from_the_argument_first(tmp_path):
    from rocketidx.output.open import open_index_dir
    _index_file(tmp_path / "20240101000000000", items=FULL)
    d = open_index_dir(tmp_path, 3, 6)
    assert (d.hash_slot_num, d.index_num, d.hash_slot_num_from, d.index_num_from) == (3, 6, "argument", "argument")


def test_a_bare_directory_s_sizes_come_from_its_files_then_the_defaults(tmp_path):
    from rocketidx.output.open import open_index_dir
    from rocketidx.layout import DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM
    full, part = tmp_path / "full", tmp_path / "part"
    full.mkdir(), part.mkdir()
    _index_file(full / "20240101000000000", items=FULL)
    d = open_index_dir(full)  # a full file: indexCount is indexNum, the size gives the slots
    assert (d.hash_slot_num, d.index_num, d.hash_slot_num_from, d.index_num_from) == (3, 6, "files", "files")
    _index_file(part / "20240101000000000")  # not full: the size alone is one equation, two unknowns
    d = open_index_dir(part)
    assert (d.hash_slot_num, d.index_num) == (DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM)
    assert (d.hash_slot_num_from, d.index_num_from) == ("default", "default")
    d = open_index_dir(part, hash_slot_num=3)  # one size given: the file's size gives the other
    assert (d.index_num, d.hash_slot_num_from, d.index_num_from) == (6, "argument", "files")


def test_a_build_output_s_sizes_and_files_come_from_its_manifest(tmp_path):
    import json

    from rocketidx.output.open import open_index_dir
    out = tmp_path / "out"
    (out / "index").mkdir(parents=True)
    for name in ("20240101000000000", "20240101010000000", "20231231000000000"):
        _index_file(out / "index" / name)
    names = ["20240101000000000", "20240101010000000"]  # the manifest's files, in its order; not the stray
    (out / "_manifest.json").write_text(json.dumps({"version": 1, "hash_slot_num": 3, "index_num": 6,
                                                    "window_ms": 3_600_000,
                                                    "files": [_manifest_row(n, seq=i) for i, n in enumerate(names)]}))
    for path in (out, out / "index"):
        d = open_index_dir(path)
        assert d.names == tuple(names) and d.directory == str(out / "index")
        assert (d.hash_slot_num, d.index_num, d.hash_slot_num_from, d.index_num_from) == (3, 6, "manifest", "manifest")
        assert d.manifest.window_ms == 3_600_000 and d.manifest.window_ids == [0, 0]
    d = open_index_dir(out, index_num=6)
    assert (d.hash_slot_num_from, d.index_num_from) == ("manifest", "argument")
    assert [f.name for f in d.open()] == names


def test_a_bare_directory_lists_its_files_in_name_order_without_dot_files(tmp_path):
    from rocketidx.output.open import open_index_dir
    for name in ("20240102000000000", "20240101000000000", ".20240101000000000.swp"):
        _index_file(tmp_path / name)
    (tmp_path / "sub").mkdir()
    assert open_index_dir(tmp_path, 3, 6).names == ("20240101000000000", "20240102000000000")


def test_no_directory_is_a_typed_error_unless_missing_is_allowed(tmp_path):
    from rocketidx.errors import StoreLayoutError
    from rocketidx.output.open import open_index_dir
    with pytest.raises(StoreLayoutError, match="none: no such directory"):
        open_index_dir(tmp_path / "none")
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(StoreLayoutError, match="file: not a directory"):
        open_index_dir(tmp_path / "file")
    d = open_index_dir(tmp_path / "none", 3, None, missing_ok=True)
    assert d.names == () and (d.hash_slot_num_from, d.index_num_from) == ("argument", "default")


# --- the manifest -----------------------------------------------------------------------------------

def test_the_manifest_round_trips_byte_for_byte(tmp_path):
    import json

    from rocketidx.build.in_process import build_index
    from rocketidx.config import BuildConfig
    from rocketidx.output.manifest import Manifest
    from rocketidx.output.target import open_manifest, read_manifest
    from refdata import GOLDEN_CASES
    case = GOLDEN_CASES[0]  # tests/reference/golden is in the repository
    returned, _ = build_index(case / "commitlog", tmp_path / "out", BuildConfig(hash_slot_num=64, index_num=256,
                                                                               window_ms=3_600_000, timezone="UTC"))
    raw = (tmp_path / "out" / "_manifest.json").read_text()
    m = Manifest.read(tmp_path / "out")
    assert m.to_json() == raw == json.dumps(returned, indent=2) + "\n"
    assert m == open_manifest(tmp_path / "out") == Manifest.from_dict(returned)
    assert read_manifest(tmp_path / "out") == returned == json.loads(raw)
    assert (m.hash_slot_num, m.index_num, m.window_ms) == (64, 256, 3_600_000)
    assert m.names == [f["name"] for f in returned["files"]]
    assert m.files[0].index_count == returned["files"][0]["index_count"]
    assert list(m.header) == [k for k in returned if k != "files"]  # the build's keys, in its order


def test_a_header_the_manifest_does_not_know_is_kept_as_written():
    from rocketidx.output.manifest import Manifest, ManifestFile
    row = ManifestFile(**_manifest_row("a"))
    m = Manifest.build({"version": 1, "filters": {"from_offset": 5}, "zeta": [1, 2]}, [row])
    again = Manifest.from_json(m.to_json())
    assert again == m and again.to_json() == m.to_json()
    assert list(again.to_dict()) == ["version", "filters", "zeta", "files"]
    assert again.hash_slot_num is None and again.file("a") == row and again.file("b") is None


@pytest.mark.parametrize("text, why", [("{", "not a manifest"), ("[]", "JSON list"),
                                       ('{"files": {}}', "not a list"),
                                       ('{"files": [{"name": "a"}]}', "files\\[0\\]")])
def test_a_malformed_manifest_is_a_typed_error_naming_it(tmp_path, text, why):
    from rocketidx.errors import StoreLayoutError
    from rocketidx.output.manifest import Manifest
    (tmp_path / "_manifest.json").write_text(text)
    with pytest.raises(StoreLayoutError, match=why) as e:
        Manifest.read(tmp_path)
    assert e.value.path == str(tmp_path / "_manifest.json")


def test_pack_spreads_sizes_over_groups_largest_first():
    from rocketidx.arrays import pack
    assert pack([5, 1, 1, 1, 4], 2) == [[0, 2], [1, 3, 4]]
    assert pack([0, 0, 0], 2) == [[0, 2], [1]]  # a size below 1 counts as 1
    assert pack([], 3) == []


def test_a_writer_without_room_for_an_entry_is_a_config_error(tmp_path):
    from rocketidx.errors import ConfigError
    from rocketidx.index.writer import WindowWriter
    for slots, items in ((0, 10), (7, 1)):
        with pytest.raises(ConfigError):
            WindowWriter(tmp_path, 0, 0, slots, items)


def test_the_zero_scan_reads_every_byte_where_seek_data_is_missing(tmp_path, monkeypatch):
    """A filesystem without SEEK_DATA (EINVAL) must not pass for 'holes to the end'."""
    import errno
    import os

    import rocketidx.storage as storage
    p = tmp_path / "f"
    p.write_bytes(bytes(5000) + b"\x01" + bytes(100))
    assert storage.first_nonzero(str(p), 0, 5101) == 5000

    def no_seek_data(fd, pos, how):
        if how == os.SEEK_DATA:
            raise OSError(errno.EINVAL, "SEEK_DATA not supported")
        return real(fd, pos, how)
    real = os.lseek
    monkeypatch.setattr(os, "lseek", no_seek_data)
    assert storage.first_nonzero(str(p), 0, 5101) == 5000
    assert storage.first_nonzero(str(p), 5001, 5101) is None


def test_a_header_of_zeros_reads_as_an_empty_file_as_the_broker_loads_it(tmp_path):
    """A broker killed right after it created its next IndexFile leaves the file all zeros; IndexHeader.load
    takes an indexCount of 0 (or less) as 1, so its restart loads the file as empty, and so does rocketidx
    (backfill used to refuse such a store: "indexCount 0 outside [1, 400]", make test's crash run, 47c593c)."""
    from rocketidx.index.reader import FileRef
    import rocketidx.layout as L
    path = tmp_path / "20261129043655685"
    path.write_bytes(bytes(L.index_file_size(64, 400)))
    f = FileRef(str(path), 64, 400, 0).open()  # checks the header
    assert f.header.index_count == 1 and f.header.end_phy_offset == 0
    assert list(f.iter_items()) == []
    path.write_bytes(bytes(36) + (-5).to_bytes(4, "big", signed=True) + bytes(L.index_file_size(64, 400) - 40))
    assert FileRef(str(path), 64, 400, 0).open().header.index_count == 1
