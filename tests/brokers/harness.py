"""Real RocketMQ brokers for tests: fetch a release's jars with Maven, start a namesrv and a broker on
127.0.0.1, stop them cleanly or with kill -9, and leave no process, port or directory behind.

The jars are cached outside the repository: Maven's own ``~/.m2`` and a copy per version under
``$ROCKETIDX_BROKER_CACHE`` (default ``~/.cache/rocketidx/brokers``), so only the first run downloads.
Which versions, and which one CI runs, is written in ``versions.txt`` beside this file.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("ROCKETIDX_BROKER_CACHE", Path.home() / ".cache" / "rocketidx" / "brokers"))
ARTIFACTS = ("rocketmq-broker", "rocketmq-namesrv", "rocketmq-client", "rocketmq-tools")


_LIVE: set[subprocess.Popen] = set()


@atexit.register
def _kill_left() -> None:
    """A test run that ends any way at all takes its JVMs with it (kill -9: nothing is waited for)."""
    for proc in list(_LIVE):
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL)


def _spawn(cmd: list[str], **kw) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, start_new_session=True, **kw)
    _LIVE.add(proc)
    return proc


class HarnessError(RuntimeError):
    """A broker or namesrv would not start, stop or serve; the message names its log."""


class MavenUnavailable(HarnessError):
    """Maven, or the registry behind it, cannot give a version's jars."""


def versions() -> tuple[list[str], str]:
    """The pinned versions of versions.txt and the one marked ``ci``."""
    pinned, ci = [], None
    for words in _lines():
        pinned.append(words[0])
        if "ci" in words[1:]:
            ci = words[0]
    return pinned, ci or pinned[-1]


def _lines() -> list[list[str]]:
    out = []
    for line in (HERE / "versions.txt").read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            out.append(words)
    return out


def substitute(version: str) -> str | None:
    """The release whose broker, namesrv and filter modules stand in for ``version``'s where Maven does not
    serve those three (versions.txt's ``broker=R``); every other RocketMQ module, the store among them, is
    ``version``'s own."""
    for words in _lines():
        if words[0] == version:
            for w in words[1:]:
                if w.startswith("broker="):
                    return w.split("=", 1)[1]
    return None


def major(version: str) -> int:
    return int(version.split(".", 1)[0])


# The modules a 4.9/5.x broker pulls in besides broker, namesrv and filter: pinned to the version itself
# when its broker comes from a substitute, so that the store that writes the files is the version's.
OWN_MODULES = ("rocketmq-store", "rocketmq-common", "rocketmq-remoting", "rocketmq-client", "rocketmq-tools",
               "rocketmq-srvutil", "rocketmq-acl", "rocketmq-logging")


def _pom(version: str) -> str:
    sub = substitute(version)

    def dep(a: str, v: str) -> str:
        return (f"<dependency><groupId>org.apache.rocketmq</groupId><artifactId>{a}</artifactId>"
                f"<version>{v}</version></dependency>\n")

    deps = "".join(dep(a, sub if sub and a in ("rocketmq-broker", "rocketmq-namesrv") else version)
                   for a in ARTIFACTS)
    managed = ("<dependencyManagement><dependencies>\n" + "".join(dep(a, version) for a in OWN_MODULES)
               + "</dependencies></dependencyManagement>\n") if sub else ""
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>\n"
            f"<groupId>rocketidx.brokers</groupId><artifactId>rocketmq-{version}</artifactId><version>1</version>\n"
            f"<packaging>pom</packaging>{managed}<dependencies>\n{deps}</dependencies></project>\n")


def fetch(version: str) -> Path:
    """The directory of every jar a broker, namesrv and client of ``version`` need (downloaded once)."""
    home = CACHE / version
    lib, stamp = home / "lib", home / "lib.complete"
    pom = _pom(version)
    if stamp.exists() and stamp.read_text() in ("", pom):  # "" : a stamp from before the pom was kept in it
        return lib
    if shutil.which("mvn") is None:
        raise MavenUnavailable("mvn is not on PATH: the broker tests need Maven to fetch RocketMQ's jars")
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(pom)
    shutil.rmtree(lib, ignore_errors=True)
    run = subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={lib}"],
                         cwd=home, capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        why = [ln for ln in run.stdout.splitlines() + run.stderr.splitlines() if "ERROR" in ln][:1]
        raise MavenUnavailable(f"Maven could not fetch RocketMQ {version}: {why[0] if why else run.returncode}")
    stamp.write_text(pom)
    return lib


def java_home() -> str | None:
    return os.environ.get("ROCKETIDX_BROKER_JAVA_HOME") or os.environ.get("JAVA_HOME")


def java_bin(tool: str = "java") -> str:
    home = java_home()
    return str(Path(home) / "bin" / tool) if home else tool


# What runbroker.sh/runserver.sh of either line set that Java 17 still takes, and the opens a broker's
# mmap code (the direct buffer cleaner, sun.nio.ch) needs on a module-system JVM.
JVM_FLAGS = [
    "-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow",
    "-Djava.net.preferIPv4Stack=true",
    "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",  # 4.9's MappedFile.clean: else no clean shutdown
    "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
]

LOGBACK = """<?xml version="1.0" encoding="UTF-8"?>
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5level [%thread] %logger{{24}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_listen_port() -> int:
    """A listen port whose derived ports are free as well: fastListenPort (listenPort-2) and the HA
    port (listenPort+1)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if 1100 < port < 65000 and all(_port_free(p) for p in (port - 2, port, port + 1)):
            return port
    raise HarnessError("no free port with its neighbours free")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, log: Path, what: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise HarnessError(f"{what} exited with {proc.returncode} before serving; see {log}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise HarnessError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s; see {log}")


def _wait_line(path: Path, needle: str, proc: subprocess.Popen, what: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and needle in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise HarnessError(f"{what} exited with {proc.returncode} before '{needle}'; see {path}")
        time.sleep(0.2)
    raise HarnessError(f"{what} did not print '{needle}' within {timeout:.0f} s; see {path}")


def default_broker_conf(**over) -> dict[str, object]:
    """Small files, so a short workload spans several CommitLog segments, queue files and IndexFiles."""
    conf: dict[str, object] = {
        "brokerClusterName": "rocketidx", "brokerName": "broker-a", "brokerId": 0, "brokerRole": "ASYNC_MASTER",
        "brokerIP1": "127.0.0.1",
        "flushDiskType": "ASYNC_FLUSH",
        "mappedFileSizeCommitLog": 1 << 20,
        "mappedFileSizeConsumeQueue": 20 * 200,
        "maxHashSlotNum": 64,
        "maxIndexNum": 400,
        "messageIndexEnable": "true",
        "messageIndexSafe": "false",
        "maxMessageSize": 256 * 1024,
        "autoCreateTopicEnable": "true",
        "defaultTopicQueueNums": 4,
        "messageDelayLevel": "1s 2s 3s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s",
        "transactionCheckInterval": 3000,
        "transactionTimeOut": 2000,
        "transactionCheckMax": 3,
        # 5.x writes commit/rollback ops in batches (TransactionalOpBatchService, 3 s by default): with a
        # 2 s timeout the check would see outcomes not written yet and settle them again
        "transactionOpBatchInterval": 200,
        "diskMaxUsedSpaceRatio": 95,
        "deleteWhen": "04",
        "fileReservedTime": 720,
        "waitTimeMillsInSendQueue": 2000,
    }
    conf.update(over)
    return conf


@dataclass
class Cluster:
    """One namesrv and one broker of a version, with the store under ``root/store``."""

    version: str
    root: Path
    conf: dict[str, object] = field(default_factory=default_broker_conf)
    namesrv: subprocess.Popen | None = None
    broker: subprocess.Popen | None = None
    ns_port: int = 0
    port: int = 0

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def broker_conf(self) -> Path:
        return self.root / "broker.conf"

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    @property
    def lib(self) -> Path:
        return fetch(self.version)

    def classpath(self) -> str:
        return str(self.lib / "*")

    def _home(self) -> Path:
        """ROCKETMQ_HOME: 4.9.x's BrokerStartup reads $ROCKETMQ_HOME/conf/logback_broker.xml, which no jar
        carries; 5.x reads rmq.*.logback.xml from the same place."""
        home = self.root / "home"
        conf = home / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        for name, log in (("logback_broker.xml", "broker"), ("logback_namesrv.xml", "namesrv"),
                          ("rmq.broker.logback.xml", "broker"), ("rmq.namesrv.logback.xml", "namesrv"),
                          ("logback_tools.xml", "tools"), ("rmq.tools.logback.xml", "tools"),
                          ("rmq.client.logback.xml", "client")):
            (conf / name).write_text(LOGBACK.format(log=self.root / "logs" / f"{log}.log"))
        return home

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["ROCKETMQ_HOME"] = str(self._home())
        env.pop("JAVA_TOOL_OPTIONS", None)
        return env

    def _props(self) -> list[str]:
        home = self._home()
        return [f"-Drocketmq.home.dir={home}", f"-Duser.home={self.root}",
                f"-Dlogback.configurationFile={home / 'conf' / 'logback_broker.xml'}",
                f"-Drmq.logback.configurationFile={home / 'conf' / 'rmq.broker.logback.xml'}",
                "-Drocketmq.client.logUseSlf4j=true"]

    def write_conf(self) -> Path:
        conf = dict(self.conf)
        conf["listenPort"] = self.port
        conf["namesrvAddr"] = self.namesrv_addr
        conf["storePathRootDir"] = str(self.store)
        conf["storePathCommitLog"] = str(self.store / "commitlog")
        self.broker_conf.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        return self.broker_conf

    def start(self, timeout: float = 90.0) -> "Cluster":
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)
        if self.namesrv is None or self.namesrv.poll() is not None:
            self._start_namesrv(timeout)
        self.start_broker(timeout)
        return self

    def _start_namesrv(self, timeout: float) -> None:
        self.ns_port = free_port()
        ns_conf = self.root / "namesrv.conf"
        ns_conf.write_text(f"listenPort={self.ns_port}\n")
        out = self.root / "logs" / "namesrv.out"
        with open(out, "ab") as fh:
            self.namesrv = _spawn(
                [java_bin(), *JVM_FLAGS, *self._props(), "-cp", self.classpath(),
                 "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(ns_conf)],
                cwd=self.root, env=self._env(), stdout=fh, stderr=subprocess.STDOUT)
        _wait_port(self.ns_port, self.namesrv, out, f"RocketMQ {self.version} namesrv", timeout)

    def start_broker(self, timeout: float = 90.0) -> None:
        """Start (or restart) the broker on the same store; returns once it said boot success and listens."""
        if self.broker is not None and self.broker.poll() is None:
            raise HarnessError("the broker is running")
        if not self.port:
            self.port = free_listen_port()
        self.write_conf()
        out = self.root / "logs" / "broker.out"
        mark = out.stat().st_size if out.exists() else 0
        with open(out, "ab") as fh:
            self.broker = _spawn(
                [java_bin(), *JVM_FLAGS, *self._props(), "-cp", self.classpath(),
                 "org.apache.rocketmq.broker.BrokerStartup", "-c", str(self.broker_conf), "-n", self.namesrv_addr],
                cwd=self.root, env=self._env(), stdout=fh, stderr=subprocess.STDOUT)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = out.read_bytes()[mark:].decode(errors="replace") if out.exists() else ""
            if "boot success" in text:
                break
            if self.broker.poll() is not None:
                raise HarnessError(f"RocketMQ {self.version} broker exited with {self.broker.returncode}; "
                                   f"see {out}")
            time.sleep(0.2)
        else:
            raise HarnessError(f"RocketMQ {self.version} broker did not boot within {timeout:.0f} s; see {out}")
        _wait_port(self.port, self.broker, out, f"RocketMQ {self.version} broker", timeout)

    def stop_broker(self, kill: bool = False, timeout: float = 60.0) -> float:
        """Stop the broker: SIGTERM runs its shutdown hook (a clean shutdown: flushes, deletes ``abort``),
        kill=True is kill -9 (a crash). Returns the seconds it took."""
        t0 = time.monotonic()
        proc, self.broker = self.broker, None
        if proc is not None and proc.poll() is None:
            _signal_group(proc, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(10)
                raise HarnessError(f"RocketMQ {self.version} broker ignored SIGTERM for {timeout:.0f} s; killed")
        return time.monotonic() - t0

    def stop(self) -> None:
        """Everything down (broker cleanly when it still runs), whatever state it was left in."""
        with contextlib.suppress(HarnessError):
            self.stop_broker()
        proc, self.namesrv = self.namesrv, None
        if proc is not None and proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(10)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


DRIVER = HERE / "driver" / "Workload.java"


def driver_classes(version: str) -> Path:
    """Workload.java compiled against ``version``'s client and tools jars (once per source change)."""
    import hashlib
    digest = hashlib.sha1(DRIVER.read_bytes()).hexdigest()[:12]
    out = CACHE / version / f"driver-{digest}"
    if (out / "Workload.class").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([java_bin("javac"), "-nowarn", "-encoding", "UTF-8", "-cp", str(fetch(version) / "*"),
                          "-d", str(out), str(DRIVER)], capture_output=True, text=True)
    if run.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise HarnessError(f"javac Workload.java against RocketMQ {version}:\n{run.stderr[-3000:]}")
    return out


def run_driver(cluster: Cluster, *args: str, timeout: float = 600.0, log: str = "driver") -> subprocess.CompletedProcess:
    """Run the workload client (``send``/``read``/``query``) against the cluster's namesrv."""
    cp = f"{driver_classes(cluster.version)}{os.pathsep}{cluster.lib / '*'}"
    err = cluster.root / "logs" / f"{log}.err"
    with open(err, "ab") as fh:
        run = subprocess.run([java_bin(), "-Xmx256m", *cluster._props(), "-Drocketmq.client.logLevel=WARN",
                              "-cp", cp, "Workload", args[0], cluster.namesrv_addr, *args[1:]],
                             cwd=cluster.root, env=cluster._env(), stdout=fh, stderr=fh, timeout=timeout)
    if run.returncode != 0:
        raise HarnessError(f"Workload {args[0]} exited with {run.returncode}; see {err}")
    return run
