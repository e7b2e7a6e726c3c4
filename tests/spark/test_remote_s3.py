"""The Spark build against the test S3 server (tests/s3server.py): every golden case from an ``s3://``
CommitLog into an ``s3://`` output on ``local[2]`` is byte-identical and answers remote queries; Spark's
verify and stats read the remote output; a killed build leaves the previous remote output readable; two
builds racing for one output never both commit."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from s3server import assert_golden_output, committed_files
from refdata import GOLDEN_CASES, case_config, expected_files, expected_queries, golden_params, load_case

from rocketidx import storage
from rocketidx.output import read_manifest
from rocketidx.query import open_index, query_offsets

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("case", golden_params())
def test_a_golden_case_from_s3_into_s3_on_spark_is_byte_identical(spark, s3_server, case):
    from rocketidx.spark.pipeline import build_index_spark
    bucket = s3_server.new_bucket()
    commitlog, out = f"s3://{bucket}/store/commitlog", f"s3://{bucket}/out"
    s3_server.upload_dir(str(case / "commitlog"), commitlog)
    manifest, _ = build_index_spark(commitlog, out, case_config(case), spark=spark, split_bytes=65_536,
                                    shuffle_partitions=2)
    assert_golden_output(case, out, manifest)


def test_spark_verify_and_stats_read_a_remote_output(spark, s3_server, capsys):
    from rocketidx.cli import main
    from rocketidx.spark.pipeline import build_index_spark
    case = GOLDEN_CASES[0]
    bucket = s3_server.new_bucket()
    commitlog, out = f"s3://{bucket}/store/commitlog", f"s3://{bucket}/out"
    s3_server.upload_dir(str(case / "commitlog"), commitlog)
    build_index_spark(commitlog, out, case_config(case), spark=spark, split_bytes=65_536, shuffle_partitions=2)
    capsys.readouterr()
    args = ["verify", "--index", out, "--commitlog", commitlog, "--json"]
    assert main(args + ["--in-process"]) == 0
    core = json.loads(capsys.readouterr().out)
    assert main(args + ["--spark", "--split-bytes", "65536"]) == 0
    assert json.loads(capsys.readouterr().out) == core and core["clean"]
    assert main(["stats", "--index", out, "--json", "--in-process"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(["stats", "--index", out, "--json", "--master", "local[2]"]) == 0
    on_spark = json.loads(capsys.readouterr().out)
    assert local.pop("engine")["name"] == "in-process" and on_spark.pop("engine")["name"] == "spark"
    assert on_spark == local


def _build_cmd(commitlog: str, out: str, case) -> list[str]:
    c = load_case(case)
    return [sys.executable, "-m", "rocketidx.cli", "build", "--commitlog", commitlog, "--out", out,
            "--master", "local[2]", "--split-bytes", "65536", "--hash-slots", str(c["hashSlotNum"]),
            "--index-num", str(c["indexNum"]), "--window", str(c["windowMillis"]), "--timezone", "UTC"]


def test_a_killed_spark_build_leaves_the_previous_remote_output_readable(s3_server):
    case = GOLDEN_CASES[0]
    bucket = s3_server.new_bucket()
    commitlog, out = f"s3://{bucket}/store/commitlog", f"s3://{bucket}/out"
    s3_server.upload_dir(str(case / "commitlog"), commitlog)
    assert subprocess.run(_build_cmd(commitlog, out, case), capture_output=True).returncode == 0
    first = read_manifest(out)
    before = committed_files(out)
    proc = subprocess.Popen(_build_cmd(commitlog, out, case), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    lock = storage.join(out, ".lock")
    deadline = time.monotonic() + 120
    while storage.stat(lock) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)  # past the lock's settle pause: staging and tasks under way
    assert proc.poll() is None, "the build ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert read_manifest(out) == first and committed_files(out) == before
    q = expected_queries(case)[0]
    assert query_offsets(open_index(out), q["topic"], q["key"], q["begin"], q["end"], q["maxNum"]) == q["offsets"]
    rerun = subprocess.run(_build_cmd(commitlog, out, case), capture_output=True, text=True)
    assert rerun.returncode == 2 and "delete it and run again" in rerun.stderr  # the killed driver's lock
    storage.filesystem(lock)[0].delete_file(storage.filesystem(lock)[1])
    assert subprocess.run(_build_cmd(commitlog, out, case), capture_output=True).returncode == 0
    assert committed_files(out) == before


def test_two_builds_racing_for_one_remote_output_never_both_commit(s3_server):
    case = GOLDEN_CASES[0]
    bucket = s3_server.new_bucket()
    commitlog, out = f"s3://{bucket}/store/commitlog", f"s3://{bucket}/out"
    s3_server.upload_dir(str(case / "commitlog"), commitlog)
    cmd = _build_cmd(commitlog, out, case)
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 2], results
    loser = next(err for rc, err in results if rc == 2)
    assert "another rocketidx build is writing this output" in loser
    assert [g for g in committed_files(out)] == [e.read_bytes() for e in expected_files(case)]
