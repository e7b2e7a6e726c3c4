"""One parser for sizes, counts, durations, times and flags: the same spelling means the same value on
the CLI, in conf/ files, in jobs and in Spark options, and a bad one is a ConfigError naming the option."""
from __future__ import annotations

import argparse
import json

import pytest

from rocketidx import cli
from rocketidx.config import load_config
from rocketidx.errors import ConfigError
from rocketidx.spark.session import load_spark_settings
from rocketidx.spark.sources.commitlog import SourceOptions
from rocketidx.units import (format_duration, parse_bool, parse_count, parse_duration_ms, parse_size, parse_time_ms,
                             size_arg, time_arg)


@pytest.mark.parametrize("text, value", [
    ("134217728", 134217728), ("128m", 128 << 20), ("128M", 128 << 20), ("128mb", 128 << 20), ("128MiB", 128 << 20),
    ("64KiB", 64 << 10), ("64k", 64 << 10), ("1g", 1 << 30), ("1.5g", 3 << 29), ("2t", 2 << 40), (" 4 k ", 4096),
    (4096, 4096), ("100b", 100),
])
def test_sizes(text, value):
    assert parse_size(text, "x") == value


@pytest.mark.parametrize("text", ["0", "-1", "1x", "", "m", "1.5", "0.3k", "1e3", True])
def test_bad_sizes_name_the_option(text):
    with pytest.raises(ConfigError) as e:
        parse_size(text, "split_bytes")
    assert e.value.option == "split_bytes"


def test_counts():
    assert parse_count("20_000_000", "n") == 20_000_000 and parse_count(0, "n") == 0
    for bad, minimum in (("-1", 0), ("0", 1), ("1.5", 0), ("ten", 0)):
        with pytest.raises(ConfigError):
            parse_count(bad, "n", minimum=minimum)


def test_durations_and_times():
    assert [parse_duration_ms(t) for t in ("1h", "15m", "90s", "250ms", "2d", "0", "3600000", 5)] == [
        3_600_000, 900_000, 90_000, 250, 172_800_000, 0, 3_600_000, 5]
    assert parse_time_ms("2023-11-14T22:13:20Z") == parse_time_ms("2023-11-14T22:13:20") == 1_700_000_000_000
    assert parse_time_ms("2023-11-14T23:13:20.123+01:00") == 1_700_000_000_123
    assert parse_time_ms("1700000000000") == 1_700_000_000_000
    for bad in ("1 fortnight", "-1h"):
        with pytest.raises(ConfigError):
            parse_duration_ms(bad, "window")
    with pytest.raises(ConfigError):
        parse_time_ms("yesterday", "from_time")


def test_flags():
    assert [parse_bool(t) for t in ("true", "FALSE", "1", "0", "yes", "off", True)] == [
        True, False, True, False, True, False, True]
    with pytest.raises(ConfigError):
        parse_bool("maybe", "check_crc")


def test_every_way_in_reads_a_size_alike(tmp_path):
    """The CLI flag, conf/spark.json and the Spark source option take the same spellings."""
    for text in ("64k", "1.5m", "65536"):
        flag = size_arg("--split-bytes")(text)
        conf = tmp_path / "spark.json"
        conf.write_text(json.dumps({"split_bytes": text}))
        assert load_spark_settings(conf).split_bytes == flag
        assert SourceOptions.parse({"path": "/s", "split_bytes": text}).split_bytes == flag
    with pytest.raises(argparse.ArgumentTypeError):
        size_arg("--split-bytes")("0")
    assert time_arg("--from-time")("2023-11-14T22:13:20Z") == 1_700_000_000_000


def test_conf_window_and_flag_window_agree(tmp_path):
    conf = tmp_path / "defaults.json"
    conf.write_text(json.dumps({"index": {"window": "15m"}}))
    assert load_config(conf).window_ms == 900_000


@pytest.mark.parametrize("flag", ["--topics", "--queues"])
def test_gen_with_no_topic_or_no_queue_exits_2_naming_the_setting(tmp_path, capsys, flag):
    """Issue 31 item 21: ``--topics 0`` was taken as one topic, while ``--queues 0`` was refused."""
    rc = cli.main(["gen", "--out", str(tmp_path / "s"), "--messages", "10", flag, "0"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{flag[2:]}=0: must be at least 1" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s").exists()


def test_gen_with_a_segment_too_small_exits_2_naming_the_setting(tmp_path, capsys):
    rc = cli.main(["gen", "--out", str(tmp_path / "s"), "--messages", "10", "--segment-bytes", "100"])
    err = capsys.readouterr().err
    assert rc == 2 and "segment_bytes" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_duration_is_printed_as_it_is_written():
    """``stats --bucket``'s table heading says the bucket as the flag spells it (issue 31 item 9)."""
    for text in ("1h", "10m", "90s", "250ms", "2d", "0"):
        assert format_duration(parse_duration_ms(text)) == text
    assert format_duration(5_400_000) == "90m" and format_duration(3_600_001) == "3600001ms"
