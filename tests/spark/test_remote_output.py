"""The Spark build to an ``s3://`` output on the test S3 server: the golden bytes and the in-process manifest,
a rebuild replaces the output (keeping the replaced version for its readers until the next build), a held
lock or a failed commit leaves the previous output readable; a ``file://`` output is the local disk, sparse
(the output alone is tested without a JVM in tests/unit/output/test_outputs.py)."""
from __future__ import annotations

import json
import os

import pytest

from refdata import GOLDEN_CASES, case_config, expected_files

from rocketidx.build.in_process import build_index
from rocketidx.errors import StoreLockedError
from rocketidx.output.local import CURRENT_FILE, INDEX_DIR, MANIFEST, SUCCESS
from rocketidx.output.remote import RemoteOutput
from rocketidx.output.target import read_manifest
import rocketidx.storage as storage

CASE = GOLDEN_CASES[0]


def committed(out: str) -> tuple[str, dict]:
    """The version directory ``OUT/CURRENT`` names, read as a plain reader would, and its manifest."""
    version = storage.join(out, storage.read_bytes(storage.join(out, CURRENT_FILE)).decode().strip())
    return version, json.loads(storage.read_bytes(storage.join(version, MANIFEST)))


def names(uri: str) -> list[str]:
    return [e.name for e in storage.listdir(uri)]


def snapshot(uri: str) -> dict[str, bytes]:
    """Every object under ``uri`` by its relative name."""
    import pyarrow.fs as pafs
    fs, root = storage.filesystem(uri)
    out = {}
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as f:
                out[info.path[len(root) + 1:]] = f.read()
    return out


@pytest.fixture(scope="module")
def core_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("core")
    build_index(CASE / "commitlog", out, case_config(CASE))
    return out


@pytest.fixture(scope="module")
def spark_build(spark, s3_server, core_build):
    """One Spark build of the golden case to an ``s3://`` output: (output URI, manifest returned)."""
    from rocketidx.spark.build import build_index_spark
    out = f"s3://{s3_server.new_bucket()}/out"
    manifest, _ = build_index_spark(CASE / "commitlog", out, case_config(CASE), spark=spark,
                                    split_bytes=100_003, shuffle_partitions=2)
    return out, manifest


@pytest.mark.spark
def test_a_build_to_s3_gives_the_golden_bytes_and_the_in_process_manifest(spark_build, core_build):
    out, manifest = spark_build
    version, stored = committed(out)
    assert stored == manifest == json.loads((core_build / MANIFEST).read_text())
    assert names(storage.join(version, INDEX_DIR)) == sorted(f["name"] for f in manifest["files"])
    exp = expected_files(CASE)
    assert len(manifest["files"]) == len(exp)
    for e, f in zip(exp, manifest["files"]):
        assert storage.read_bytes(storage.join(version, INDEX_DIR, f["name"])) == e.read_bytes(), e.name
    assert names(out) == sorted([CURRENT_FILE, SUCCESS, storage.basename(version)])
    assert names(version) == [MANIFEST, INDEX_DIR]  # _tasks gone
    assert read_manifest(out) == manifest


@pytest.mark.spark
def test_a_spark_build_to_a_file_uri_is_the_local_layout_and_stays_sparse(spark, tmp_path, core_build):
    from rocketidx.spark.build import build_index_spark
    out = tmp_path / "out"
    manifest, _ = build_index_spark(CASE / "commitlog", out.as_uri(), case_config(CASE), spark=spark,
                                    split_bytes=100_003, shuffle_partitions=2)
    assert (out / MANIFEST).is_symlink() and not (out / CURRENT_FILE).exists()
    assert manifest == json.loads((core_build / MANIFEST).read_text())
    files = [out / INDEX_DIR / f["name"] for f in manifest["files"]]
    assert [p.read_bytes() for p in files] == [p.read_bytes() for p in expected_files(CASE)]
    assert sum(os.stat(p).st_blocks * 512 for p in files) < sum(os.path.getsize(p) for p in files)


@pytest.mark.spark
def test_rebuilding_an_s3_output_replaces_it_and_keeps_the_old_version_until_the_next(spark, s3_server, spark_build):
    from rocketidx.spark.build import build_index_spark
    first, first_manifest = spark_build
    old, _ = committed(first)
    out = f"s3://{s3_server.new_bucket()}/out"
    build_index_spark(CASE / "commitlog", out, case_config(CASE), spark=spark, split_bytes=100_003,
                      shuffle_partitions=2)
    before, _ = committed(out)
    manifest, _ = build_index_spark(CASE / "commitlog", out, case_config(CASE), spark=spark,
                                    split_bytes=77_777, shuffle_partitions=3)
    version, stored = committed(out)
    assert version != before
    assert names(out) == sorted([CURRENT_FILE, SUCCESS, storage.basename(before), storage.basename(version)])
    assert stored == manifest == first_manifest
    for f in manifest["files"]:
        assert storage.read_bytes(storage.join(version, INDEX_DIR, f["name"])) == \
            storage.read_bytes(storage.join(old, INDEX_DIR, f["name"]))
    build_index_spark(CASE / "commitlog", out, case_config(CASE), spark=spark, split_bytes=100_003,
                      shuffle_partitions=2)
    assert storage.basename(before) not in names(out)  # gone when the next build started


@pytest.mark.spark
def test_a_held_lock_object_refuses_a_spark_build(spark, spark_build):
    from rocketidx.spark.build import build_index_spark
    out, manifest = spark_build
    remote = RemoteOutput.from_uri(out)
    with remote.lock(settle_s=0):
        with pytest.raises(StoreLockedError, match="another rocketidx build is writing this output"):
            build_index_spark(CASE / "commitlog", out, case_config(CASE), spark=spark)
    assert read_manifest(out) == manifest


@pytest.mark.spark
def test_a_spark_build_that_fails_at_the_commit_leaves_the_previous_output(spark, s3_server, spark_build,
                                                                           monkeypatch):
    from rocketidx.spark.build import build_index_spark
    _, manifest = spark_build
    out = f"s3://{s3_server.new_bucket()}/out"
    build_index_spark(CASE / "commitlog", out, case_config(CASE), spark=spark, split_bytes=100_003,
                      shuffle_partitions=2)
    before = snapshot(out)

    def fail(self, version):
        raise OSError("killed while writing CURRENT")
    monkeypatch.setattr(RemoteOutput, "_write_current", fail)
    with pytest.raises(OSError, match="killed while writing CURRENT"):
        build_index_spark(CASE / "commitlog", out, case_config(CASE), spark=spark, split_bytes=100_003,
                          shuffle_partitions=2)
    after = snapshot(out)
    # As locally, _SUCCESS goes just before the pointer moves and comes back after it.
    assert after == {k: v for k, v in before.items() if k != SUCCESS}
    assert read_manifest(out) == manifest
