"""Relative paths without a JVM (issue 31, item 3): a command resolves every path it is given once, at its
entry; what a manifest records is the resolved CommitLog directory, so a cron job typed in another directory
rebuilds its own output; a manifest of an older rocketidx that recorded the path as typed still counts as the
same log when the log's path ends with it. Every writing command on both engines from three directories:
tests/spark/test_relative_paths.py."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from rocketidx import cli, config
from rocketidx.output.safety import _same_log
import rocketidx.storage as storage

SMALL = ["--hash-slots", "101", "--index-num", "5000", "--timezone", "UTC", "--in-process"]


def committed_manifest(out: Path) -> Path:
    """The committed version's manifest file (``OUT/_manifest.json`` is a symlink into it)."""
    return (out / "_manifest.json").resolve()


@pytest.fixture
def nc(tmp_path, monkeypatch) -> Path:
    """The issue's layout: ``TMP/nc/store``, a generated log, and nothing built yet."""
    assert cli.main(["gen", "--out", str(tmp_path / "nc" / "store"), "--messages", "2000"]) == 0
    monkeypatch.chdir(tmp_path)
    return tmp_path / "nc"


def test_resolve_makes_a_local_path_absolute_and_keeps_a_uri(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage.resolve("nc/store") == str(tmp_path / "nc" / "store")
    assert storage.resolve("./store/") == str(tmp_path / "store")
    assert storage.resolve("../x") == str(tmp_path.parent / "x")
    assert storage.resolve(tmp_path / "a") == str(tmp_path / "a")
    assert storage.resolve("file:///data/my%20store") == "/data/my store"
    assert storage.resolve("s3://bucket/store?region=x") == "s3://bucket/store?region=x"
    assert storage.resolve("hdfs://nn:8020/store") == "hdfs://nn:8020/store"


def test_a_cron_job_from_another_directory_rebuilds_its_own_output(nc, monkeypatch, capsys):
    out = nc / "out"
    assert cli.main(["build", "--commitlog", "nc/store", "--out", str(out), *SMALL]) == 0
    first = committed_manifest(out).read_bytes()
    assert json.loads(first)["commitlog"] == str(nc / "store" / "commitlog")  # resolved, not as typed
    monkeypatch.chdir(nc)
    capsys.readouterr()
    assert cli.main(["build", "--commitlog", "./store/", "--out", str(out), *SMALL]) == 0, capsys.readouterr().err
    assert committed_manifest(out).read_bytes() == first


def test_every_path_argument_is_resolved_and_nothing_else(tmp_path, monkeypatch):
    """The one place that resolves them (config.resolve_paths), which the command line and both jobs call."""
    monkeypatch.chdir(tmp_path)
    a = argparse.Namespace(**{name: f"rel/{name}" for name in config.PATH_ARGS}, topic="Topic0", key="K1",
                           targets="index,consumequeue", master="local[2]")
    a.store = "s3://bucket/store"
    config.resolve_paths(a)
    assert {n: getattr(a, n) for n in config.PATH_ARGS if n != "store"} == {
        n: str(tmp_path / "rel" / n) for n in config.PATH_ARGS if n != "store"}
    assert (a.store, a.topic, a.key, a.targets, a.master) == ("s3://bucket/store", "Topic0", "K1",
                                                              "index,consumequeue", "local[2]")


def record(out: Path, commitlog: str) -> Path:
    """Make the committed manifest of ``out`` name ``commitlog``, as an older rocketidx wrote it; its path."""
    manifest = committed_manifest(out)
    manifest.write_text(json.dumps(dict(json.loads(manifest.read_text()), commitlog=commitlog), indent=2) + "\n")
    return manifest


@pytest.mark.parametrize("recorded", ["nc/store/commitlog", "./nc/store/commitlog", "../../nc/store/commitlog"])
def test_an_older_manifest_naming_the_log_as_typed_is_the_same_log_from_anywhere(nc, monkeypatch, capsys, recorded):
    """Before issue 31 a manifest recorded the path as typed, relative to a directory it did not record: the log
    is the same when its resolved path ends with the recorded names, two at least (docs/formats.md, "The
    manifest"); a record naming another log, or too little to tell, is refused as before."""
    out = nc / "out"
    assert cli.main(["build", "--commitlog", str(nc / "store"), "--out", str(out), *SMALL]) == 0
    monkeypatch.chdir(nc)  # where none of these records names the log
    for other in ("other/store/commitlog", "./commitlog", "commitlog", "."):
        before = record(out, other).read_bytes()
        capsys.readouterr()
        assert cli.main(["build", "--commitlog", "store", "--out", "out", *SMALL]) == 2
        err = capsys.readouterr().err
        assert f"another kind: CommitLog {other} (this build reads {nc / 'store' / 'commitlog'})" in err
        assert committed_manifest(out).read_bytes() == before
    monkeypatch.chdir(nc / "store")  # where the recorded path names nothing
    record(out, recorded)
    assert cli.main(["build", "--commitlog", ".", "--out", "../out", *SMALL]) == 0, capsys.readouterr().err
    assert json.loads(committed_manifest(out).read_text())["commitlog"] == str(nc / "store" / "commitlog")


def test_same_log_compares_resolved_paths_and_a_relative_record_by_its_names(tmp_path):
    log = tmp_path / "nc" / "store" / "commitlog"
    log.mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "nc", target_is_directory=True)
    assert _same_log(str(log), str(log))
    assert _same_log(str(tmp_path / "link" / "store" / "commitlog"), str(log))  # one directory, two names
    assert _same_log(str(log), "store/commitlog")
    assert _same_log(str(tmp_path / "link" / "store" / "commitlog"), "nc/store/commitlog")  # through the link
    assert not _same_log(str(log), "other/commitlog")
    assert not _same_log(str(log), str(tmp_path / "other" / "store" / "commitlog"))  # absolute: exactly
    assert not _same_log(str(log), "commitlog")
    assert _same_log("s3://b/store/commitlog", "s3://b/store/commitlog/")
    assert not _same_log(str(log), "s3://b/nc/store/commitlog")
    assert os.path.isabs(storage.resolve("store"))


def test_a_word_that_is_not_a_path_stays_a_word(tmp_path, monkeypatch):
    """``--time-index none`` means no time index, not a directory named none (it once became <cwd>/none)."""
    import argparse

    from rocketidx.config import resolve_paths
    monkeypatch.chdir(tmp_path)
    a = argparse.Namespace(time_index="none", out="o")
    resolve_paths(a)
    assert a.time_index == "none" and a.out == str(tmp_path / "o")
    a = argparse.Namespace(time_index="ti")
    resolve_paths(a)
    assert a.time_index == str(tmp_path / "ti")
