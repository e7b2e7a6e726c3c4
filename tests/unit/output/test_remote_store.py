"""Remote stores end to end, in process, against the test S3 server (tests/support/s3server.py): every golden case
built from an ``s3://`` CommitLog into an ``s3://`` output is byte-identical, and query, verify and stats of
that output (and ``query --store --show`` of a remote store) give the local answers. A remote query reads
a few ranges, not files; ``file://`` names the local disk everywhere. The Spark build to S3 is in
tests/spark/test_remote_s3.py."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from s3server import assert_golden_output, committed_files
from refdata import GOLDEN_CASES, case_config, expected_files, expected_queries, golden_params

from rocketidx.build.in_process import build_index
from rocketidx.cli import main
from rocketidx.config import BuildConfig
from rocketidx.errors import StoreLayoutError, StoreLockedError
from rocketidx.output.local import CURRENT_FILE
from rocketidx.output.manifest import INDEX_DIR, MANIFEST
from rocketidx.output.remote import RemoteOutput
from rocketidx.output.target import read_manifest
from rocketidx.query.lookup import open_index, query_offsets
import rocketidx.storage as storage


@pytest.fixture
def s3_case(s3_server, request):
    """(case, s3:// store URI holding its commitlog/, s3:// URI for an output) on a fresh bucket."""
    case = request.param
    bucket = s3_server.new_bucket()
    store = f"s3://{bucket}/store"
    s3_server.upload_dir(str(case / "commitlog"), f"{store}/commitlog")
    return case, store, f"s3://{bucket}/out"


@pytest.mark.parametrize("s3_case", golden_params(), indirect=True)
def test_a_golden_case_from_s3_into_s3_is_byte_identical_and_answers_remotely(s3_case, capsys):
    case, store, out = s3_case
    manifest, summary = build_index(f"{store}/commitlog", out, case_config(case))
    assert_golden_output(case, out, manifest)
    assert manifest["commitlog"] == f"{store}/commitlog"
    assert main(["verify", "--index", out, "--commitlog", store, "--in-process"]) == 0
    assert "clean" in capsys.readouterr().out


def test_query_stats_and_verify_of_an_s3_output_answer_as_the_local_copy(s3_server, tmp_path, capsys):
    case = GOLDEN_CASES[0]
    bucket = s3_server.new_bucket()
    store, out, local = f"s3://{bucket}/store", f"s3://{bucket}/out", str(tmp_path / "local")
    s3_server.upload_dir(str(case / "commitlog"), f"{store}/commitlog")
    cfg = case_config(case)
    build_index(case / "commitlog", local, cfg)
    assert main(["build", "--commitlog", store, "--out", out, "--in-process", "--hash-slots", str(cfg.hash_slot_num),
                 "--index-num", str(cfg.index_num), "--window", str(cfg.window_ms), "--timezone", "UTC"]) == 0
    capsys.readouterr()
    q = expected_queries(case)[0]
    for where in (local, out):
        assert main(["query", "--index", where, "--topic", q["topic"], "--key", q["key"], "--show", "--json",
                     "--commitlog", store if where == out else str(case / "commitlog")]) == 0
    shown_local, shown_remote = capsys.readouterr().out.strip().split("\n", 1)
    assert json.loads(shown_local) == json.loads(shown_remote) and json.loads(shown_local)["phy_offset"] in q["offsets"]
    reports = []
    for where in (local, out):
        assert main(["stats", "--index", where, "--json", "--in-process"]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    for r in reports:  # where the files are is not a statistic; a remote object is never sparse
        r["summary"].pop("index"), r["summary"].pop("disk_bytes")
        for row in r["files"]:
            row.pop("path", None), row.pop("disk_bytes")
    assert reports[0] == reports[1]


def test_a_remote_query_reads_ranges_not_files(s3_server, tmp_path, capsys):
    """Counted at the server: a key query costs the pointer and manifest, then per file a few blocks (its
    header, a slot, the chain's items), however large the file."""
    case = GOLDEN_CASES[0]
    out = f"s3://{s3_server.new_bucket()}/out"
    cfg = BuildConfig(hash_slot_num=100_000, index_num=400_000, window_ms=24 * 3_600_000, timezone="UTC")
    build_index(case / "commitlog", out, cfg)  # one 8.4 MB file a day: two days here
    stored = committed_files(out)
    q = expected_queries(case)[0]
    before = s3_server.traffic.snapshot()[0]
    assert main(["-v", "query", "--index", out, "--topic", q["topic"], "--key", q["key"]]) == 0
    served = s3_server.traffic.snapshot()[0] - before
    captured = capsys.readouterr()
    assert json.loads(captured.out)["offsets"] == q["offsets"]
    manifest = len(json.dumps(read_manifest(out))) + 64
    assert served <= manifest + len(stored) * 4 * storage.BLOCK < sum(map(len, stored)) // 100
    said = int(re.search(r"read ([\d,]+) bytes from remote storage", captured.err)[1].replace(",", ""))
    assert said <= served <= said + 4096  # the server's count adds its directory listings' XML


def test_a_file_uri_is_the_local_disk_for_every_command(tmp_path, capsys):
    case = GOLDEN_CASES[0]
    cfg = case_config(case)
    out = tmp_path / "out"
    assert main(["build", "--commitlog", (case / "commitlog").as_uri(), "--out", out.as_uri(), "--in-process",
                 "--hash-slots", str(cfg.hash_slot_num), "--index-num", str(cfg.index_num),
                 "--window", str(cfg.window_ms), "--timezone", "UTC"]) == 0
    assert (out / MANIFEST).is_symlink()  # the local layout: sparse files, symlinked version
    got = [out / INDEX_DIR / f["name"] for f in json.loads((out / MANIFEST).read_text())["files"]]
    assert [g.read_bytes() for g in got] == [e.read_bytes() for e in expected_files(case)]
    assert sum(os.stat(g).st_blocks * 512 for g in got) < sum(os.path.getsize(g) for g in got)  # still sparse
    q = expected_queries(case)[0]
    capsys.readouterr()
    assert main(["query", "--index", out.as_uri(), "--topic", q["topic"], "--key", q["key"]]) == 0
    assert json.loads(capsys.readouterr().out)["offsets"] == q["offsets"]
    assert main(["verify", "--index", out.as_uri(), "--commitlog", (case / "commitlog").as_uri(),
                 "--in-process"]) == 0
    assert main(["stats", "--index", out.as_uri(), "--in-process"]) == 0


def test_readers_follow_the_current_pointer_of_a_local_directory(tmp_path, capsys):
    """A directory with the remote layout (CURRENT naming a version), e.g. a file:// output an earlier
    release wrote: readers read the version it names, not the pointer as an IndexFile."""
    case = GOLDEN_CASES[0]
    cfg = case_config(case)
    out = tmp_path / "out"
    RemoteOutput.from_uri(out.as_uri())  # the class on pyarrow's local filesystem writes that layout
    build_index(case / "commitlog", tmp_path / "plain", cfg)
    remote = RemoteOutput.from_uri(out.as_uri())
    with remote.lock(settle_s=0):
        remote.publish(str(tmp_path / "plain"))
    assert (out / CURRENT_FILE).is_file()
    q = expected_queries(case)[0]
    assert query_offsets(open_index(out), q["topic"], q["key"], q["begin"], q["end"], q["maxNum"]) == q["offsets"]
    assert main(["verify", "--index", str(out), "--commitlog", str(case / "commitlog"), "--in-process"]) == 0
    assert "clean" in capsys.readouterr().out


def test_backfill_refuses_a_uri_with_a_clear_error(capsys):
    assert main(["backfill", "--store", "s3://bucket/store", "--in-process"]) == 2
    err = capsys.readouterr().err
    assert "s3://bucket/store" in err and "local store" in err and "Traceback" not in err


def test_secrets_in_a_uri_are_not_printed_or_stored(s3_server, tmp_path, capsys):
    case = GOLDEN_CASES[0]
    bucket = s3_server.new_bucket()
    store = f"s3://{bucket}/store"
    s3_server.upload_dir(str(case / "commitlog"), f"{store}/commitlog")
    secret = "SECRETSECRET"  # moto takes any key pair; pyarrow takes one in the URI's user part
    creds = f"rocketidx-test:{secret}@"
    out = f"s3://{bucket}/out"
    assert main(["-v", "build", "--commitlog", f"s3://{creds}{bucket}/store/commitlog", "--out",
                 f"s3://{creds}{bucket}/out", "--in-process", "--json", "--hash-slots", "97", "--index-num", "300"]) == 0
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    assert secret not in json.dumps(read_manifest(out))
    assert main(["query", "--index", f"s3://{creds}{bucket}/nothing", "--topic", "t", "--key", "k"]) == 2
    err = capsys.readouterr().err
    assert "nothing" in err and secret not in err


def test_an_in_process_build_to_a_held_remote_output_is_refused_and_leaves_it(s3_server, tmp_path):
    case = GOLDEN_CASES[0]
    out = f"s3://{s3_server.new_bucket()}/out"
    cfg = case_config(case)
    first, _ = build_index(case / "commitlog", out, cfg)
    remote = RemoteOutput.from_uri(out)
    with remote.lock(settle_s=0):
        with pytest.raises(StoreLockedError):
            build_index(case / "commitlog", out, cfg)
    assert read_manifest(out) == first


def test_a_build_that_fails_leaves_the_previous_remote_output(s3_server, tmp_path, monkeypatch):
    case = GOLDEN_CASES[0]
    out = f"s3://{s3_server.new_bucket()}/out"
    cfg = case_config(case)
    first, _ = build_index(case / "commitlog", out, cfg)
    before = committed_files(out)

    def cut(self, staging, written):
        raise OSError("connection reset")
    monkeypatch.setattr(RemoteOutput, "_point_at", cut)
    with pytest.raises(OSError):
        build_index(case / "commitlog", out, cfg)
    monkeypatch.undo()
    assert read_manifest(out) == first and committed_files(out) == before
    listing = [e.name for e in storage.listdir(out)]
    assert sorted(n for n in listing if n.startswith(".v-")) == [RemoteOutput.from_uri(out).current_version()]


def test_a_missing_remote_index_says_no_such_directory(s3_server):
    uri = f"s3://{s3_server.new_bucket()}/none"
    with pytest.raises(StoreLayoutError, match="no such directory"):
        open_index(uri)


def test_the_scratch_output_of_a_remote_build_is_removed(s3_server, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    case = GOLDEN_CASES[0]
    build_index(case / "commitlog", f"s3://{s3_server.new_bucket()}/out", case_config(case))
    assert os.listdir(tmp_path / "scratch") == []
    shutil.rmtree(tmp_path / "scratch")


def test_two_builds_racing_for_one_remote_output_never_both_commit(s3_server):
    """Two processes start a build of one s3:// output at once: the lock object lets one through."""
    import subprocess
    import sys
    case = GOLDEN_CASES[0]
    bucket = s3_server.new_bucket()
    commitlog, out = f"s3://{bucket}/store/commitlog", f"s3://{bucket}/out"
    s3_server.upload_dir(str(case / "commitlog"), commitlog)
    cfg = case_config(case)
    cmd = [sys.executable, "-m", "rocketidx", "build", "--commitlog", commitlog, "--out", out, "--in-process",
           "--hash-slots", str(cfg.hash_slot_num), "--index-num", str(cfg.index_num), "--window", str(cfg.window_ms),
           "--timezone", "UTC"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 2], results
    assert "another rocketidx build is writing this output" in next(err for rc, err in results if rc == 2)
    assert committed_files(out) == [e.read_bytes() for e in expected_files(case)]


def test_query_store_show_reads_a_remote_broker_store(s3_server, capsys):
    """``query --store s3://...``: the store's index/ answers, its commitlog/ backs --show."""
    case = GOLDEN_CASES[0]
    store = f"s3://{s3_server.new_bucket()}/store"
    s3_server.upload_dir(str(case / "commitlog"), f"{store}/commitlog")
    build_index(f"{store}/commitlog", f"{store}/index", case_config(case))
    q = expected_queries(case)[0]
    assert main(["query", "--store", store, "--topic", q["topic"], "--key", q["key"], "--show", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["phy_offset"] for r in rows] == q["offsets"] and all(r["topic"] == q["topic"] for r in rows)
