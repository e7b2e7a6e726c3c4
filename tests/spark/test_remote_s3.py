"""The Spark build against the test S3 server (tests/support/s3server.py): every golden case from an ``s3://``
CommitLog into an ``s3://`` output on ``local[2]`` is byte-identical and answers remote queries; Spark's
verify and stats read the remote output; a killed build leaves the previous remote output readable. (Two
builds racing for one remote output: tests/unit/output/test_remote_store.py, with in-process builds.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from s3server import assert_golden_output, committed_files
from refdata import GOLDEN_CASES, case_config, expected_queries, golden_params, load_case

from rocketidx.output.target import read_manifest
from rocketidx.query.lookup import open_index, query_offsets
import rocketidx.storage as storage

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("case", golden_params())
def test_a_golden_case_from_s3_into_s3_on_spark_is_byte_identical(spark, s3_server, case):
    from rocketidx.spark.build import build_index_spark
    bucket = s3_server.new_bucket()
    commitlog, out = f"s3://{bucket}/store/commitlog", f"s3://{bucket}/out"
    s3_server.upload_dir(str(case / "commitlog"), commitlog)
    manifest, _ = build_index_spark(commitlog, out, case_config(case), spark=spark, split_bytes=65_536,
                                    shuffle_partitions=2)
    assert_golden_output(case, out, manifest)


def test_spark_verify_and_stats_read_a_remote_output(spark, s3_server, capsys):
    from rocketidx.cli import main
    from rocketidx.spark.build import build_index_spark
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
    from rocketidx.output.open import open_index_dir
    from rocketidx.spark.verify import verify_index_spark
    d = open_index_dir(out)  # the files by URI, sized from the directory they are in
    by_uri = verify_index_spark(d.paths, spark=spark, split_bytes=65_536)
    assert by_uri.clean and len(by_uri.files) == len(d.paths)
    assert main(["stats", "--index", out, "--json", "--in-process"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(["stats", "--index", out, "--json", "--master", "local[2]"]) == 0
    on_spark = json.loads(capsys.readouterr().out)
    assert local.pop("engine")["name"] == "in-process" and on_spark.pop("engine")["name"] == "spark"
    assert on_spark == local


def _build_args(commitlog: str, out: str, case) -> list[str]:
    c = load_case(case)
    return ["build", "--commitlog", commitlog, "--out", out, "--hash-slots", str(c["hashSlotNum"]),
            "--index-num", str(c["indexNum"]), "--window", str(c["windowMillis"]), "--timezone", "UTC"]


def test_a_killed_spark_build_leaves_the_previous_remote_output_readable(s3_server):
    """The previous output and the reruns are in-process builds (same bytes, no JVM to start); the build
    killed is a Spark driver's process group, once its lock object is written and its tasks under way."""
    from rocketidx.cli import main
    case = GOLDEN_CASES[0]
    bucket = s3_server.new_bucket()
    commitlog, out = f"s3://{bucket}/store/commitlog", f"s3://{bucket}/out"
    s3_server.upload_dir(str(case / "commitlog"), commitlog)
    args = _build_args(commitlog, out, case)
    assert main(args + ["--in-process"]) == 0
    first = read_manifest(out)
    before = committed_files(out)
    proc = subprocess.Popen([sys.executable, "-m", "rocketidx", *args, "--master", "local[2]", "--split-bytes",
                             "65536"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
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
    assert main(args + ["--in-process"]) == 2  # the killed driver's lock object stays: its error says so
    storage.filesystem(lock)[0].delete_file(storage.filesystem(lock)[1])
    assert main(args + ["--in-process"]) == 0
    assert committed_files(out) == before
