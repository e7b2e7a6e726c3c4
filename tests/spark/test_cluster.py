"""The job on a real Spark standalone cluster (issue 24): a master and two one-core workers on 127.0.0.1
(tests/standalone.py), ``spark-submit --master spark://...`` with the environment archive ``make dist`` builds,
reading a CommitLog from the S3 test server and writing an ``s3://`` output: no path is shared between the driver
and the executors but the object store."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from refdata import golden_params, load_case
from readme_doc import logical_lines, read_all, shell_blocks
from s3server import ENV as S3_ENV, assert_golden_output
from standalone import Cluster, dist_archive

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def archive() -> Path:
    return dist_archive()[0]


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(workers=2, cores=1, memory="1g").start()
    yield c
    c.stop()


SECTION = "On a cluster: ship the environment"


def cluster_recipe() -> list[str]:
    """The commands of docs/spark.md's standalone block, ``make dist`` left out (the ``archive`` fixture runs its
    code, once), in order."""
    blocks, _ = read_all()
    [block] = [b for b in shell_blocks(blocks) if any(SECTION in h for h in b.headings) and "$SPARK_MASTER" in b.text]
    return [line for line in logical_lines(block.text) if line != "make dist"]


def run_recipe(cluster: Cluster, work: Path, env: dict[str, str], job_args: list[str] = (),
               script: Path | None = None) -> subprocess.CompletedProcess:
    """The block as written, in a fresh shell, in ``work`` laid out like the project root (``.venv``, ``jobs`` and
    ``dist`` link to this checkout's: what the block unpacks lands in ``work``), with ``env`` (the master, the
    URIs, the S3 settings); ``job_args`` appended to the job's flags; ``script``: another Python file submitted
    the same way."""
    for name in (".venv", "jobs", "dist"):
        if not (work / name).exists():
            (work / name).symlink_to(ROOT / name, target_is_directory=True)
    lines = cluster_recipe()
    if script is not None:
        lines[-1] = lines[-1].split(" jobs/nightly_rebuild.py ")[0] + f" {shlex.quote(str(script))}"
    lines[-1] += "".join(f" {shlex.quote(a)}" for a in job_args)
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "AWS_"))}
    shell.update(env, SPARK_MASTER=cluster.url, **{k: os.environ[k] for k in (*S3_ENV, "AWS_ENDPOINT_URL")})
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + "\n".join(lines)], cwd=work, env=shell,
                          capture_output=True, text=True, timeout=300, start_new_session=True)


def failed(p: subprocess.CompletedProcess) -> str:
    """A failed submission's story: its stdout's end and the error lines of its stderr, not the JVM's stack."""
    errors = [line for line in p.stderr.splitlines() if ("Error" in line or "Exception" in line or "rocketidx" in line)
              and not line.lstrip().startswith("at ")]
    return f"exit {p.returncode}\n{p.stdout[-1500:]}\n" + "\n".join(errors[:30])


def test_the_executors_import_rocketidx_from_the_unpacked_archive_with_its_kernel(cluster, archive, s3_server,
                                                                                 tmp_path):
    from rocketidx.spark.ship import kernel_in
    assert kernel_in(archive)
    p = run_recipe(cluster, tmp_path, {"COMMITLOG": "unused", "OUT": "unused"},
                   script=ROOT / "tests" / "cluster_probe.py")
    assert p.returncode == 0, failed(p)
    [line] = [line for line in p.stdout.splitlines() if line.startswith("PROBE ")]
    rows = json.loads(line[len("PROBE "):])
    assert len(rows) == 4
    for r in rows:
        assert r["file"].startswith(os.path.join(r["cwd"], "env", "lib")), r  # inside the unpacked archive
        assert r["reader"] == "kernel" and str(ROOT) not in r["file"]


@pytest.mark.parametrize("case", golden_params())
def test_every_golden_case_built_on_the_cluster_from_s3_into_s3_is_byte_identical(cluster, archive, s3_server,
                                                                                  case, tmp_path):
    from rocketidx.output.target import read_manifest
    c = load_case(case)
    bucket = s3_server.new_bucket()
    commitlog, out = f"s3://{bucket}/store/commitlog", f"s3://{bucket}/out"
    s3_server.upload_dir(str(case / "commitlog"), commitlog)
    p = run_recipe(cluster, tmp_path, {"COMMITLOG": commitlog, "OUT": out},
                   ["--hash-slots", str(c["hashSlotNum"]), "--index-num", str(c["indexNum"]), "--window",
                    str(c["windowMillis"]), "--split-bytes", "65536", "--json"])
    assert p.returncode == 0, failed(p)
    [summary] = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert summary["reader"] == "kernel" and summary["engine"]["name"] == "spark"
    assert_golden_output(case, out, read_manifest(out))
