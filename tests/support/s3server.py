"""A real S3 endpoint for the tests: moto's server on 127.0.0.1, in a thread of the test process.

rocketidx reaches it the way it reaches any S3 store, through ``pyarrow.fs.FileSystem.from_uri`` and the
standard environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...). That environment is set when
pytest starts (:func:`configure_environment`), before any Spark JVM, so Spark's Python workers inherit it;
the server itself starts on first use (well under a second). The server counts what it sends back for
GET requests, so a test can say how many bytes a command read from the store, measured at the server.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

ENV = {
    "AWS_ACCESS_KEY_ID": "rocketidx-test",
    "AWS_SECRET_ACCESS_KEY": "rocketidx-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def configure_environment() -> str:
    """Pick the server's port and point the AWS environment at it; returns the endpoint URL."""
    if os.environ.get("ROCKETIDX_TEST_S3_ENDPOINT"):
        return os.environ["ROCKETIDX_TEST_S3_ENDPOINT"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(ENV, AWS_ENDPOINT_URL=endpoint, ROCKETIDX_TEST_S3_ENDPOINT=endpoint)
    return endpoint


def committed_files(uri: str) -> list[bytes]:
    """The committed IndexFiles of a remote output, oldest first, read back through pyarrow alone."""
    from rocketidx.output.remote import RemoteOutput
    out = RemoteOutput.from_uri(uri)
    index = out.index_path()
    got = []
    for row in out.read_manifest()["files"]:
        with out.fs.open_input_stream(f"{index}/{row['name']}") as f:
            got.append(f.read())
    return got


def committed_queues(uri: str) -> dict[str, bytes]:
    """The committed ConsumeQueue files of a remote output (``topic/queueId/name`` -> bytes), as its manifest
    lists them, read back through pyarrow alone."""
    from rocketidx.output.remote import RemoteOutput
    out = RemoteOutput.from_uri(uri)
    version = out.current_version()
    got = {}
    for q in out.read_manifest()["consumequeues"]["queues"]:
        for name in q["files"]:
            rel = f"{q['topic']}/{q['queue_id']}/{name}"
            with out.fs.open_input_stream(out.path(version, "consumequeue", rel)) as f:
                got[rel] = f.read()
    return got


def assert_golden_output(case, uri: str, manifest: dict) -> None:
    """The remote output at ``uri`` holds the case's expected files byte for byte, under ``manifest``,
    and answers every query of the case as RocketMQ did, read remotely."""
    from refdata import expected_files, expected_queries

    from rocketidx.output.target import read_manifest
    from rocketidx.query.lookup import open_index, query_offsets
    got = committed_files(uri)
    exp = expected_files(case)
    assert len(got) == len(exp)
    for e, g in zip(exp, got):
        assert g == e.read_bytes(), e.name
    assert read_manifest(uri) == manifest
    files = open_index(uri)
    for q in expected_queries(case):
        assert query_offsets(files, q["topic"], q["key"], q["begin"], q["end"], q["maxNum"]) == q["offsets"], q


class Traffic:
    """Bytes the server sent in GET response bodies, and the GET requests (thread-safe)."""

    def __init__(self):
        self._lock = threading.Condition()
        self.get_bytes = 0
        self.gets = 0
        self.requests = 0
        self.in_flight = 0

    def start(self) -> None:
        with self._lock:
            self.in_flight += 1

    def add(self, method: str, n: int) -> None:
        with self._lock:
            self.in_flight -= 1
            self.requests += 1
            if method == "GET":
                self.gets += 1
                self.get_bytes += n
            self._lock.notify_all()

    def snapshot(self) -> tuple[int, int]:
        """(GET body bytes, GETs) once no request is being answered: a client can have read a whole
        response before the server thread has counted it."""
        with self._lock:
            self._lock.wait_for(lambda: self.in_flight == 0, timeout=5)
            return self.get_bytes, self.gets


class S3Server:
    """moto's S3 over HTTP on the configured endpoint, with :class:`Traffic` counted around it."""

    def __init__(self, endpoint: str):
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
        self.endpoint = endpoint
        self.traffic = Traffic()
        app = DomainDispatcherApplication(create_backend_app)
        traffic = self.traffic

        def counted(environ, start_response):
            traffic.start()
            body = app(environ, start_response)
            n = 0
            try:
                for chunk in body:
                    n += len(chunk)
                    yield chunk
            finally:
                if hasattr(body, "close"):
                    body.close()
                traffic.add(environ.get("REQUEST_METHOD", ""), n)

        host, port = endpoint.rsplit("/", 1)[-1].split(":")
        self._server = make_server(host, int(port), counted, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="s3-test-server")
        self._thread.start()

    def new_bucket(self, prefix: str = "t") -> str:
        """A fresh bucket's name (buckets are cheap and keep tests from seeing each other's objects)."""
        import boto3
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=self.endpoint).create_bucket(Bucket=name)
        return name

    def upload_dir(self, local: str, uri: str) -> None:
        """Copy a local directory tree to ``uri`` (``s3://bucket/prefix``), files only."""
        import pyarrow.fs as pafs
        fs, root = pafs.FileSystem.from_uri(uri)
        for dirpath, _, files in os.walk(local):
            rel = os.path.relpath(dirpath, local)
            for f in files:
                dst = "/".join(p for p in (root, "" if rel == "." else rel, f) if p)
                with open(os.path.join(dirpath, f), "rb") as src, fs.open_output_stream(dst) as out:
                    while chunk := src.read(8 * 1024**2):
                        out.write(chunk)

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()
