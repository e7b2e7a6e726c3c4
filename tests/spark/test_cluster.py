"""The job on a real Spark standalone cluster (issue 24): a master and two one-core workers on 127.0.0.1
(tests/support/standalone.py), ``spark-submit --master spark://...`` with the environment archive ``make dist`` builds,
reading a CommitLog from the S3 test server and writing an ``s3://`` output: no path is shared between the driver
and the executors but the object store.

An application costs about 40 s here (its executors unpack the archive), so make test submits two golden cases
(hourly windows; Unicode keys, hash collisions, v2 records and IPv6 hosts) and the probe; the other four are
marked ``campaign`` (make brokers submits all six)."""
from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from campaign import CAMPAIGN
from refdata import GOLDEN_CASES, load_case
from s3server import assert_golden_output
from standalone import Cluster, dist_archive, run_recipe

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster_and_archive():
    """The cluster started while ``make dist``'s archive is built or found current: neither needs the other, and
    each takes seconds (the archive ~30 s when a source changed, as in a fresh checkout; the cluster ~15 s)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        built = pool.submit(dist_archive)
        c = Cluster(workers=2, cores=1, memory="1g").start()  # should it fail, the with waits for the build
        try:
            archive_path = built.result()[0]
        except BaseException:
            c.stop()
            raise
    try:
        yield c, archive_path
    finally:
        c.stop()


@pytest.fixture(scope="module")
def archive(cluster_and_archive) -> Path:
    return cluster_and_archive[1]


@pytest.fixture(scope="module")
def cluster(cluster_and_archive) -> Cluster:
    return cluster_and_archive[0]


def failed(p: subprocess.CompletedProcess) -> str:
    """A failed submission's story: its stdout's end and the error lines of its stderr, not the JVM's stack."""
    errors = [line for line in p.stderr.splitlines() if ("Error" in line or "Exception" in line or "rocketidx" in line)
              and not line.lstrip().startswith("at ")]
    return f"exit {p.returncode}\n{p.stdout[-1500:]}\n" + "\n".join(errors[:30])


def submit_case(cluster: Cluster, s3_server, case: Path, work: Path) -> tuple[subprocess.CompletedProcess, str]:
    """``case``'s CommitLog uploaded to a fresh bucket and built on the cluster into that bucket by the recipe;
    (the submission, the output's URI)."""
    c = load_case(case)
    bucket = s3_server.new_bucket()
    commitlog, out = f"s3://{bucket}/store/commitlog", f"s3://{bucket}/out"
    s3_server.upload_dir(str(case / "commitlog"), commitlog)
    p = run_recipe(cluster, work, {"COMMITLOG": commitlog, "OUT": out},
                   ["--hash-slots", str(c["hashSlotNum"]), "--index-num", str(c["indexNum"]), "--window",
                    str(c["windowMillis"]), "--split-bytes", "65536", "--json"])
    return p, out


PROBE = "probe"


@pytest.fixture(scope="module")
def submissions(cluster, archive, s3_server, tmp_path_factory) -> dict:
    """Every golden case's build and the probe, submitted two at a time as two users of a cluster would: the
    master runs one application on both workers while the next one's driver starts and waits for executors
    (an application's start, not its tasks, is most of what these small cases cost). Keyed by case name."""
    # Made here, not in the threads: tmp_path_factory's first use creates the run's base directory, which two
    # threads racing at it make twice (pytest then refuses the second: "not a normalized and relative path").
    works = {name: tmp_path_factory.mktemp(f"cluster-{name}") for name in [PROBE, *CASES]}

    def one(name: str):
        work = works[name]
        if name == PROBE:
            return run_recipe(cluster, work, {"COMMITLOG": "unused", "OUT": "unused"},
                              script=ROOT / "tests" / "support" / "cluster_probe.py"), None
        return submit_case(cluster, s3_server, CASES[name], work)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip([PROBE, *CASES], pool.map(one, [PROBE, *CASES])))


IN_MAKE_TEST = ("g1-basic-hourly", "g2-unicode-collisions-v2-ipv6")
CASES = {c.name: c for c in GOLDEN_CASES if CAMPAIGN or c.name in IN_MAKE_TEST}


def test_the_executors_import_rocketidx_from_the_unpacked_archive_with_its_kernel(submissions, archive):
    from rocketidx.packaging.ship import kernel_in
    assert kernel_in(archive)
    p, _ = submissions[PROBE]
    assert p.returncode == 0, failed(p)
    [line] = [line for line in p.stdout.splitlines() if line.startswith("PROBE ")]
    rows = json.loads(line[len("PROBE "):])
    assert len(rows) == 4
    for r in rows:
        assert r["file"].startswith(os.path.join(r["cwd"], "env", "lib")), r  # inside the unpacked archive
        assert r["reader"] == "kernel" and str(ROOT) not in r["file"]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=() if c.name in IN_MAKE_TEST else pytest.mark.campaign)
                                  for c in GOLDEN_CASES])
def test_every_golden_case_built_on_the_cluster_from_s3_into_s3_is_byte_identical(submissions, case):
    from rocketidx.output.target import read_manifest
    p, out = submissions[case.name]
    assert p.returncode == 0, failed(p)
    [summary] = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert summary["reader"] == "kernel" and summary["engine"]["name"] == "spark"
    assert_golden_output(case, out, read_manifest(out))
