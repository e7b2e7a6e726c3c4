"""rocketidx.storage: one set of calls for a local path, a file:// URI and an s3:// URI (the test S3
server), giving the same answers; remote reads counted; nothing secret in what is shown."""
from __future__ import annotations

import os

import pytest

from rocketidx.errors import StoreLayoutError
import rocketidx.storage as storage


def test_a_file_uri_is_its_local_path():
    assert storage.normalize("file:///data/store") == "/data/store"
    assert storage.normalize("file://localhost/data/my%20store") == "/data/my store"
    assert storage.normalize("/data/store") == "/data/store"
    assert storage.normalize("s3://b/store") == "s3://b/store"
    assert not storage.is_remote("file:///data") and storage.is_remote("s3://b/x")


def test_a_file_uri_on_another_host_is_refused():
    with pytest.raises(StoreLayoutError, match="elsewhere:9"):
        storage.normalize("file://elsewhere:9/data")


def test_redact_drops_options_and_credentials():
    assert storage.redact("s3://b/x?access_key=AK&secret_key=SK&region=eu") == "s3://b/x"
    assert storage.redact("hdfs://user:pw@nn:8020/x") == "hdfs://nn:8020/x"
    assert storage.redact("/local/x") == "/local/x"


def make_tree(root: str) -> None:
    os.makedirs(os.path.join(root, "sub"), exist_ok=True)
    with open(os.path.join(root, "a.bin"), "wb") as f:
        f.write(bytes(range(256)) * 4)
    with open(os.path.join(root, "sub", "b"), "wb") as f:
        f.write(b"bee")


@pytest.fixture(params=["path", "file-uri", "s3"])
def tree(request, tmp_path):
    """The same small tree, reached as a path, a file:// URI or on the S3 server."""
    local = str(tmp_path / "tree")
    make_tree(local)
    if request.param == "path":
        return local
    if request.param == "file-uri":
        return (tmp_path / "tree").as_uri()
    server = request.getfixturevalue("s3_server")
    uri = f"s3://{server.new_bucket()}/tree"
    server.upload_dir(local, uri)
    return uri


def test_every_kind_lists_stats_and_reads_alike(tree):
    names = [(e.name, e.kind, e.size) for e in storage.listdir(tree)]
    assert names == [("a.bin", storage.FILE, 1024), ("sub", storage.DIR, 0)]
    assert storage.stat(storage.join(tree, "sub")).kind == storage.DIR
    assert storage.stat(storage.join(tree, "nope")) is None
    assert storage.read_bytes(storage.join(tree, "sub", "b")) == b"bee"
    assert storage.read_bytes(storage.join(tree, "missing")) is None
    with storage.RangeFile(storage.join(tree, "a.bin")) as f:
        assert f.size == 1024
        assert f.read_at(4, 254) == bytes([254, 255, 0, 1])
        assert f.read_at(10, 1020) == bytes([252, 253, 254, 255])  # short only where the file ends
    buf = storage.map_range(storage.join(tree, "a.bin"), 1024, 256, 512)
    assert bytes(buf[256:260]) == bytes([0, 1, 2, 3])


def test_remote_reads_are_counted_as_the_server_sent_them_and_local_ones_are_not(tmp_path, s3_server):
    local = str(tmp_path / "tree")
    os.makedirs(local)
    with open(os.path.join(local, "big"), "wb") as f:
        f.write(os.urandom(10 * storage.BLOCK))
    uri = f"s3://{s3_server.new_bucket()}/tree"
    s3_server.upload_dir(local, uri)
    storage.READS.reset()
    with storage.RangeFile(os.path.join(local, "big")) as f:
        f.read_at(100, 0)
    assert storage.READS.bytes == 0
    served = s3_server.traffic.snapshot()[0]
    with open(os.path.join(local, "big"), "rb") as raw, storage.RangeFile(storage.join(uri, "big")) as f:
        whole = raw.read()
        assert f.read_at(100, 7) == whole[7:107]  # one block
        assert f.read_at(20, 500) == whole[500:520]  # the same block, kept
        assert f.read_at(30, 2 * storage.BLOCK - 10) == whole[2 * storage.BLOCK - 10:2 * storage.BLOCK + 20]  # two
        assert f.read_at(3 * storage.BLOCK, 5) == whole[5:5 + 3 * storage.BLOCK]  # large: straight through
    assert storage.READS.requests == 4
    assert storage.READS.bytes == 3 * storage.BLOCK + 3 * storage.BLOCK
    assert s3_server.traffic.snapshot()[0] - served == storage.READS.bytes  # no read-ahead behind our back


def test_a_remote_range_mapping_holds_the_range_and_zeros_elsewhere(tmp_path, s3_server):
    local = str(tmp_path / "tree")
    make_tree(local)
    uri = f"s3://{s3_server.new_bucket()}/tree"
    s3_server.upload_dir(local, uri)
    buf = storage.map_range(storage.join(uri, "a.bin"), 1024, 300, 310)
    assert len(buf) == 1024 and bytes(buf[300:310]) == bytes(range(44, 54)) and not any(buf[:300])


def test_a_filesystem_is_made_once_per_store_and_paths_map_as_from_uri_maps_them(s3_server):
    import pyarrow.fs as pafs
    bucket = s3_server.new_bucket()
    for uri in (f"s3://{bucket}", f"s3://{bucket}/", f"s3://{bucket}/a/b", f"s3://{bucket}/a/b/", f"s3://{bucket}/c"):
        fs, path = storage.filesystem(uri)
        assert path == pafs.FileSystem.from_uri(uri)[1].rstrip("/"), uri
    assert storage.filesystem(f"s3://{bucket}/x")[0] is storage.filesystem(f"s3://{bucket}/y/z")[0]
    for uri in ("file:///", "file:///tmp", "file:///tmp/a/"):
        assert storage.filesystem(uri)[1] == (pafs.FileSystem.from_uri(uri)[1].rstrip("/") or "/"), uri


@pytest.mark.parametrize("layout", ["written-head", "data-after-holes", "all-hole", "all-data", "empty"])
def test_a_sparse_copy_reads_back_byte_for_byte_and_copies_only_what_is_written(tmp_path, layout):
    """What a queue file copied ahead of an append is: the same bytes, its holes left holes (a copy of the
    written part, not of the zeros after it)."""
    size = 6_000_000
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    rng = __import__("random").Random(layout)
    writes = {"written-head": [(0, 1_234_567)], "data-after-holes": [(8192, 5000), (3 << 20, 70_000), (size - 7, 7)],
              "all-hole": [], "all-data": [(0, size)], "empty": []}[layout]
    with open(src, "wb") as f:
        f.truncate(0 if layout == "empty" else size)
        for at, n in writes:
            f.seek(at)
            f.write(bytes(rng.randrange(1, 256) for _ in range(min(n, 4096))) * (n // 4096) +
                    bytes(rng.randrange(1, 256) for _ in range(n % 4096)))
    copied = storage.copy_sparse(src, dst)
    assert open(src, "rb").read() == open(dst, "rb").read()
    written = sum(n for _, n in writes)
    # Copied: the written bytes rounded out to whole blocks, never the holes.
    assert written <= copied <= written + 2 * 4096 * len(writes)
    assert os.stat(dst).st_blocks * 512 <= os.stat(src).st_blocks * 512 + 4096 * len(writes)
    with pytest.raises(FileExistsError):
        storage.copy_sparse(src, dst)
