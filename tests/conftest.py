"""Shared fixtures of every test directory (the reference cases' paths are in refdata.py): the
reader-path parameter, the hypothesis profile, one local SparkSession and one S3 server (moto, on
127.0.0.1: tests/support/s3server.py) for the whole run, and a counter of the builds that ran the one finish.

The session is ``local[2]`` with the UI off and small Arrow batches, Python workers on this interpreter;
tests that take the ``spark`` fixture carry the ``spark`` marker.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

# The shared helpers (reference cases, scenarios, the S3 and Spark test servers) are imported by name.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# One profile for every property test: reproducible (derandomized, no example database), no deadline
# (a 2-core CI machine is slow at times), fixtures and large data allowed.
settings.register_profile("rocketidx", deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.function_scoped_fixture])
settings.load_profile("rocketidx")


def pytest_configure(config):
    # Before any Spark JVM starts: its Python workers inherit the test S3 server's endpoint this way.
    from s3server import configure_environment
    configure_environment()


def pytest_collection_modifyitems(config, items):
    from campaign import CAMPAIGN, SKIP_REASON
    if CAMPAIGN:
        return
    for item in items:
        if "campaign" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1 (tests/support/s3server.py), for the whole run."""
    from s3server import S3Server
    server = S3Server(os.environ["ROCKETIDX_TEST_S3_ENDPOINT"])
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """A fresh bucket on the test S3 server, as ``s3://name``."""
    return f"s3://{s3_server.new_bucket()}"


def _reader_native_params():
    from rocketidx.commitlog.native import native_available
    return [pytest.param(False, id="numpy"),
            pytest.param(True, id="native", marks=pytest.mark.skipif(
                not native_available(), reason="rocketidx._native is not built"))]


@pytest.fixture(params=_reader_native_params())
def reader_native(request) -> bool:
    """Run a reader/entries test on the numpy reference path and on the compiled kernel."""
    return request.param


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from rocketidx.spark.session import get_session
    session = get_session("local[2]", {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "4096",
        "spark.driver.memory": "1g",
        "spark.sql.session.timeZone": "UTC",
    })
    yield session
    session.stop()


@pytest.fixture
def finish_passes(monkeypatch) -> dict[str, int]:
    """How many times builds ran the finish's validation (only ``rocketidx.build.finish.finish_build`` calls
    ``validate``) and committed an output: a build that commits on its own counts a commit without a finish."""
    import rocketidx.build.finish as finish
    import rocketidx.output.local as local_output
    seen = {"finish": 0, "commit": 0}
    validate, commit = finish.validate, local_output.commit

    def counted_validate(*a, **kw):
        seen["finish"] += 1
        return validate(*a, **kw)

    def counted_commit(*a, **kw):
        seen["commit"] += 1
        return commit(*a, **kw)
    monkeypatch.setattr(finish, "validate", counted_validate)
    monkeypatch.setattr(local_output, "commit", counted_commit)
    return seen
