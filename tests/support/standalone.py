"""A real Spark standalone cluster on 127.0.0.1 for the cluster tests: a master and two workers started from the
installed PySpark (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), one core and a
bounded memory each, in their own process groups and a temporary directory; :meth:`Cluster.stop` leaves no
process and no directory behind.

The archive the jobs ship (``make dist``'s ``dist/rocketidx-env.tar.gz``) is built once and kept in
``dist/`` beside a stamp of the sources it was built from (:func:`dist_archive`): a later run reuses it until a
source changes.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "On a cluster: ship the environment"


def spark_home() -> str:
    import pyspark
    return os.path.dirname(pyspark.__file__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.workers, self.cores, self.memory = workers, cores, memory
        self.dir = Path(tempfile.mkdtemp(prefix="rocketidx-cluster-"))
        self.port, self.ui = _free_port(), _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.logs: list = []

    def _start(self, name: str, args: list[str]) -> None:
        # Nothing of the test's S3 settings: executors get what the job's recipe gives them (spark.executorEnv).
        # Nor a PYTHONPATH: an executor imports only what the job ships it.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYSPARK_", "PYTHON"))
               or k == "AWS_EC2_METADATA_DISABLED"}
        env.update(SPARK_HOME=spark_home(), SPARK_LOG_DIR=str(self.dir / "logs"),
                   SPARK_WORKER_DIR=str(self.dir / name), SPARK_LOCAL_DIRS=str(self.dir / "local"),
                   SPARK_NO_DAEMONIZE="1")
        log = open(self.dir / f"{name}.log", "w")
        self.logs.append(log)
        self.procs.append(subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), *args], env=env,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def start(self, timeout: float = 90) -> "Cluster":
        self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                               str(self.port), "--webui-port", str(self.ui)])
        for k in range(self.workers):
            self._start(f"worker{k}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                                       str(self.cores), "--memory", self.memory, "--webui-port", str(_free_port()),
                                       "--work-dir", str(self.dir / f"worker{k}"), self.url])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.alive_workers()) == self.workers:
                return self
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        logs = "\n".join((self.dir / f).read_text()[-1500:] for f in os.listdir(self.dir) if f.endswith(".log"))
        self.stop()
        raise RuntimeError(f"the standalone cluster did not come up: {logs}")

    def state(self) -> dict:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
                return json.loads(r.read())
        except OSError:
            return {}

    def alive_workers(self) -> list[dict]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def executor_pids(self) -> list[int]:
        """The executor JVMs the workers launched (their command lines name CoarseGrainedExecutorBackend)."""
        out = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True, text=True)
        mine = []
        for pid in map(int, out.stdout.split()):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if str(self.dir).encode() in env:
                mine.append(pid)
        return mine

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for pid in self.executor_pids():  # an executor a worker had not reaped
            os.kill(pid, signal.SIGKILL)
        for log in self.logs:
            log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _sources_digest() -> str:
    h = hashlib.sha256()
    for p in sorted([ROOT / "pyproject.toml", ROOT / "setup.py", *(ROOT / "rocketidx").rglob("*.py"),
                     *(ROOT / "rocketidx").rglob("*.c")]):
        h.update(str(p.relative_to(ROOT)).encode() + p.read_bytes())
    return h.hexdigest()


def dist_archive() -> tuple[Path, float | None]:
    """``dist/rocketidx-env.tar.gz``, built by ``make dist``'s code unless the one there was built from these
    sources; (archive, seconds the build took, None when it was reused)."""
    from rocketidx.packaging.ship import ENV_ARCHIVE, build_dist
    dist = ROOT / "dist"
    stamp = dist / ".sources-digest"
    digest = _sources_digest()
    if (dist / ENV_ARCHIVE).exists() and stamp.exists() and stamp.read_text() == digest:
        return dist / ENV_ARCHIVE, None
    t = time.monotonic()
    build_dist(dist, log=lambda *_: None)
    stamp.write_text(digest)
    return dist / ENV_ARCHIVE, time.monotonic() - t


def cluster_recipe() -> list[str]:
    """The commands of docs/spark.md's standalone block, ``make dist`` left out (:func:`dist_archive` runs its
    code, once), in order."""
    from readme_doc import logical_lines, read_all, shell_blocks
    blocks, _ = read_all()
    [block] = [b for b in shell_blocks(blocks) if any(SECTION in h for h in b.headings) and "$SPARK_MASTER" in b.text]
    return [line for line in logical_lines(block.text) if line != "make dist"]


def start_recipe(cluster: Cluster, work: Path, env: dict[str, str], job_args: list[str] = (),
                 script: Path | None = None) -> subprocess.Popen:
    """The block as written, started in a fresh shell leading its own process group, in ``work`` laid out like
    the project root (``.venv``, ``jobs`` and ``dist`` link to this checkout's: what the block unpacks lands in
    ``work``), with ``env`` (the URIs; anything else for spark-submit, such as ``SPARK_CONF_DIR``), the master
    and the S3 server's settings; ``job_args`` appended to the job's flags; ``script``: another Python file
    submitted the same way. Its output is text, on pipes."""
    from s3server import ENV as S3_ENV
    for name in (".venv", "jobs", "dist"):
        if not (work / name).exists():
            (work / name).symlink_to(ROOT / name, target_is_directory=True)
    lines = cluster_recipe()
    if script is not None:
        lines[-1] = lines[-1].split(" jobs/nightly_rebuild.py ")[0] + f" {shlex.quote(str(script))}"
    lines[-1] += "".join(f" {shlex.quote(a)}" for a in job_args)
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "AWS_"))}
    shell.update(env, SPARK_MASTER=cluster.url, **{k: os.environ[k] for k in (*S3_ENV, "AWS_ENDPOINT_URL")})
    return subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + "\n".join(lines)], cwd=work, env=shell,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def run_recipe(cluster: Cluster, work: Path, env: dict[str, str], job_args: list[str] = (),
               script: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """:func:`start_recipe`, waited for (its process group killed after ``timeout`` seconds)."""
    p = start_recipe(cluster, work, env, job_args, script)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def event_log_conf(where: Path, events: Path) -> Path:
    """A ``SPARK_CONF_DIR`` whose defaults add an uncompressed event log in ``events`` to what a submission sets
    (pass it in the submission's environment): what the faults and the bench read back with :func:`events_of`."""
    where.mkdir(parents=True, exist_ok=True)
    events.mkdir(parents=True, exist_ok=True)
    (where / "spark-defaults.conf").write_text(f"spark.eventLog.enabled true\nspark.eventLog.dir {events.as_uri()}\n"
                                               "spark.eventLog.compress false\n")
    return where


def events_of(events: Path):
    """The events of every application logged in ``events``, each a dict, in order."""
    for f in sorted(events.rglob("events*")):
        for line in f.read_text().splitlines():
            yield json.loads(line)
