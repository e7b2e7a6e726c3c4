"""The Spark build to a ``file://`` URI: the golden bytes and the in-process manifest, no symlink anywhere, a
rebuild replaces the output, a held lock or a failed commit leaves the previous output readable (the
output alone is tested without a JVM in tests/unit/test_outputs.py)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from refdata import GOLDEN_CASES, expected_files, load_case

from rocketidx.build import build_index
from rocketidx.config import BuildConfig
from rocketidx.errors import StoreLockedError
from rocketidx.output import CURRENT_FILE, INDEX_DIR, MANIFEST, SUCCESS, RemoteOutput, read_manifest

# --- the Spark build to a URI ---------------------------------------------------------------------

CASE = GOLDEN_CASES[0]


def case_config(case: Path) -> BuildConfig:
    c = load_case(case)
    return BuildConfig(hash_slot_num=c["hashSlotNum"], index_num=c["indexNum"], window_ms=c["windowMillis"],
                       timezone="UTC")


def committed(out: Path) -> tuple[Path, dict]:
    """The version directory ``OUT/CURRENT`` names, read as a plain reader would, and its manifest."""
    version = out / (out / CURRENT_FILE).read_text().strip()
    return version, json.loads((version / MANIFEST).read_text())


@pytest.fixture(scope="module")
def core_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("core")
    build_index(CASE / "commitlog", out, case_config(CASE))
    return out


@pytest.fixture(scope="module")
def spark_build(spark, tmp_path_factory, core_build):
    """One Spark build of the golden case to a ``file://`` URI: (output path, manifest returned)."""
    from rocketidx.spark.pipeline import build_index_spark
    out = tmp_path_factory.mktemp("remote") / "out"
    manifest, _ = build_index_spark(CASE / "commitlog", out.as_uri(), case_config(CASE), spark=spark,
                                    split_bytes=100_003, shuffle_partitions=2)
    return out, manifest


@pytest.mark.spark
def test_a_build_to_a_uri_gives_the_golden_bytes_and_the_in_process_manifest(spark_build, core_build):
    out, manifest = spark_build
    version, stored = committed(out)
    assert stored == manifest == json.loads((core_build / MANIFEST).read_text())
    got = [version / INDEX_DIR / f["name"] for f in manifest["files"]]
    assert sorted(os.listdir(version / INDEX_DIR)) == sorted(p.name for p in got)
    exp = expected_files(CASE)
    assert len(got) == len(exp)
    for e, g in zip(exp, got):
        assert g.read_bytes() == e.read_bytes(), (e.name, g.name)
    assert sorted(os.listdir(out)) == sorted([CURRENT_FILE, SUCCESS, version.name])
    assert sorted(os.listdir(version)) == [MANIFEST, INDEX_DIR]  # _tasks gone
    assert read_manifest(out.as_uri()) == manifest


@pytest.mark.spark
def test_a_build_to_a_uri_makes_no_symlink(spark_build):
    out, _ = spark_build
    for root, dirs, files in os.walk(out):
        assert not [n for n in dirs + files if os.path.islink(os.path.join(root, n))], root


@pytest.mark.spark
def test_rebuilding_a_uri_output_replaces_it_and_drops_the_old_version(spark, tmp_path, spark_build):
    from rocketidx.spark.pipeline import build_index_spark
    first, first_manifest = spark_build
    old, _ = committed(first)
    out = tmp_path / "out"
    build_index_spark(CASE / "commitlog", out.as_uri(), case_config(CASE), spark=spark, split_bytes=100_003,
                      shuffle_partitions=2)
    before, _ = committed(out)
    manifest, _ = build_index_spark(CASE / "commitlog", out.as_uri(), case_config(CASE), spark=spark,
                                    split_bytes=77_777, shuffle_partitions=3)
    version, stored = committed(out)
    assert version.name != before.name and not before.exists()
    assert sorted(os.listdir(out)) == sorted([CURRENT_FILE, SUCCESS, version.name])
    assert stored == manifest == first_manifest
    for f in manifest["files"]:
        assert (version / INDEX_DIR / f["name"]).read_bytes() == (old / INDEX_DIR / f["name"]).read_bytes()


@pytest.mark.spark
def test_a_held_lock_object_refuses_a_spark_build(spark, spark_build):
    from rocketidx.spark.pipeline import build_index_spark
    out, manifest = spark_build
    remote = RemoteOutput.from_uri(out.as_uri())
    with remote.lock(settle_s=0):
        with pytest.raises(StoreLockedError, match="another rocketidx build is writing this output"):
            build_index_spark(CASE / "commitlog", out.as_uri(), case_config(CASE), spark=spark)
    assert read_manifest(out.as_uri()) == manifest


@pytest.mark.spark
def test_a_spark_build_that_fails_at_the_commit_leaves_the_previous_output(spark, tmp_path, spark_build,
                                                                           monkeypatch):
    from rocketidx.spark.pipeline import build_index_spark
    src, manifest = spark_build
    out = tmp_path / "out"
    out.mkdir()
    version, _ = committed(src)
    for name in (CURRENT_FILE, SUCCESS):
        (out / name).write_bytes((src / name).read_bytes())
    (out / version.name / INDEX_DIR).mkdir(parents=True)
    for p in [version / MANIFEST, *(version / INDEX_DIR).iterdir()]:
        (out / p.relative_to(src)).write_bytes(p.read_bytes())
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def fail(self, version):
        raise OSError("killed while writing CURRENT")
    monkeypatch.setattr(RemoteOutput, "_write_current", fail)
    with pytest.raises(OSError, match="killed while writing CURRENT"):
        build_index_spark(CASE / "commitlog", out.as_uri(), case_config(CASE), spark=spark, split_bytes=100_003,
                          shuffle_partitions=2)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # As locally, _SUCCESS goes just before the pointer moves and comes back after it.
    assert after == {k: v for k, v in before.items() if k.name != SUCCESS}
    assert read_manifest(out.as_uri()) == manifest

