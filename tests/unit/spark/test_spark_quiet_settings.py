"""How rocketidx.spark.session quiets a driver JVM it starts (no JVM here: the settings and the stderr relay)."""
from __future__ import annotations

import io
import logging

from rocketidx.spark import session


def test_quiet_settings_add_the_log4j_file_after_given_java_options_and_bind_local_masters(monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    s = {"spark.master": "local[2]", "spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}
    session._quiet_settings(s)
    assert s["spark.driver.extraJavaOptions"] == \
        f"-XX:+UseSerialGC -Dlog4j2.configurationFile={session.QUIET_LOG4J.as_uri()}"
    assert session.QUIET_LOG4J.is_file()
    assert session.os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_a_given_log4j_file_and_a_cluster_master_are_left_alone(monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    s = {"spark.master": "spark://host:7077", "spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=mine.xml"}
    session._quiet_settings(s)
    assert s["spark.driver.extraJavaOptions"] == "-Dlog4j2.configurationFile=mine.xml"
    assert "SPARK_LOCAL_IP" not in session.os.environ


def test_the_relay_drops_the_jvms_start_up_notice_only(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    jvm = io.BytesIO(b"WARNING: Using incubator modules: jdk.incubator.vector\n"
                     b"26/01/01 00:00:00 WARN TaskSetManager: Lost task 0.0 in stage 1.0\n"
                     b"Traceback (most recent call last):\n")
    session._relay(jvm, session.JVM_CHATTER)
    assert err.getvalue() == ("26/01/01 00:00:00 WARN TaskSetManager: Lost task 0.0 in stage 1.0\n"
                              "Traceback (most recent call last):\n")


def test_quiet_unless_rocketidx_logs_info():
    log = logging.getLogger("rocketidx")
    old = log.level
    try:
        log.setLevel(logging.WARNING)
        assert session.quiet()
        log.setLevel(logging.INFO)
        assert not session.quiet()
    finally:
        log.setLevel(old)


def test_spark_conf_and_new_sessions_keep_the_console_progress_bar_off():
    from rocketidx.config import project_conf
    s = session.load_spark_settings(project_conf("spark.json"))
    assert s.conf["spark.ui.showConsoleProgress"] == "false"
    assert session.QUIET_DEFAULTS["spark.ui.showConsoleProgress"] == "false"
