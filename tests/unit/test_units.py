"""One parser for sizes, counts, durations, times and flags: the same spelling means the same value on
the CLI, in conf/ files, in jobs and in Spark options, and a bad one is a ConfigError naming the option."""
from __future__ import annotations

import argparse
import json

import pytest

from rocketidx import cli
from rocketidx.config import BuildConfig, load_config
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


# --- issue 31 items 13, 14, 15: settings errors in the user's words, one line each ---------------------------

def usage_error(capsys, *argv) -> str:
    """The stderr of a command argparse refuses (exit 2), which must be one line."""
    with pytest.raises(SystemExit) as stop:
        cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("value", ["-5", "0"])
def test_hash_slots_below_one_is_refused_with_one_message(tmp_path, capsys, value):
    """Item 14: -5 was "must be at least 0" at parse time, and 0 then "must be a positive integer"."""
    err = usage_error(capsys, "build", "--commitlog", tmp_path, "--out", tmp_path / "o", "--hash-slots", value)
    assert err == f"rocketidx build: error: --hash-slots: '{value}': must be a positive integer " \
                  "(see rocketidx build --help)"
    with pytest.raises(ConfigError, match="must be a positive integer"):  # the same words from a --conf file
        BuildConfig(hash_slot_num=0)


@pytest.mark.parametrize("command", [["backfill", "--store", "s"], ["verify", "--index", "i"],
                                     ["query", "--index", "i", "--topic", "T", "--key", "k"],
                                     ["stats", "--index", "i"]])
@pytest.mark.parametrize("flag", ["--hash-slots", "--index-num"])
def test_every_command_refuses_a_size_below_one_alike(capsys, command, flag):
    """Item 14, for every command that takes the sizes."""
    err = usage_error(capsys, *command, flag, "-5")
    assert f"error: {flag}: '-5': must be a positive integer" in err


def test_cq_file_size_takes_the_size_units_other_sizes_take(tmp_path, capsys):
    """Item 14: ``--cq-file-size 1m`` was "expected a whole number"; 1 MiB is rounded up to a multiple of
    20 as the broker rounds mappedFileSizeConsumeQueue."""
    assert cli.main(["gen", "--out", str(tmp_path / "s"), "--messages", "500", "--segment-bytes", "64k"]) == 0
    assert cli.main(["build", "--commitlog", str(tmp_path / "s"), "--out", str(tmp_path / "o"), "--in-process",
                     "--targets", "consumequeue", "--cq-file-size", "1m"]) == 0
    assert json.loads((tmp_path / "o" / "_manifest.json").read_text())["consumequeues"]["file_size"] == 1_048_580
    err = usage_error(capsys, "build", "--commitlog", tmp_path / "s", "--out", tmp_path / "o2", "--cq-file-size", "0")
    assert "--cq-file-size: '0': must be positive" in err


@pytest.mark.parametrize("value, says", [
    ("abc", "'abc': expected a duration like 1h, 15m, 90s, 250ms or 0"),  # after 14 lines of usage
    ("-1h", "'-1h': must not be negative"),  # was "expected one argument": -1h read as an option
])
def test_a_bad_window_is_one_line_naming_the_flag_and_the_help(tmp_path, capsys, value, says):
    """Item 15."""
    err = usage_error(capsys, "build", "--commitlog", tmp_path, "--out", tmp_path / "o", "--window", value)
    assert err == f"rocketidx build: error: --window: {says} (see rocketidx build --help)"
    assert not (tmp_path / "o").exists()
    assert "--from-offset: '-5': must be at least 0" in usage_error(
        capsys, "build", "--commitlog", tmp_path, "--out", tmp_path / "o", "--from-offset", "-5")


@pytest.mark.parametrize("given, blamed, beside", [
    (["--hash-slots", "500000000"], "--hash-slots=500000000", "--index-num 20000000 (the default)"),
    (["--index-num", "200000000"], "--index-num=200000000", "--hash-slots 5000000 (the default)"),
    (["--hash-slots", "600000000", "--index-num", "1000000"], "--hash-slots=600000000", "--index-num 1000000,"),
    (["--broker-conf", "{broker}"], "--broker-conf maxHashSlotNum=500000000", "--index-num 20000000 (the default)"),
    (["--conf", "{conf}"], "--conf hash_slot_num=500000000", "--index-num 20000000 (the default)"),
])
def test_an_index_file_too_large_to_map_names_what_the_user_gave(tmp_path, capsys, given, blamed, beside):
    """Item 13: ``--hash-slots 500000000`` was refused naming ``index_num``, a flag not given. The error names
    the flag, --broker-conf key or --conf setting the size came from, the other size, and the limit; a flag
    overriding a --conf size that is too large on its own is not refused for the file's value."""
    broker, conf = tmp_path / "broker.conf", tmp_path / "defaults.json"
    broker.write_text("maxHashSlotNum=500000000\n")
    conf.write_text(json.dumps({"index": {"hash_slot_num": 500_000_000}}))
    given = [g.format(broker=broker, conf=conf) for g in given]
    rc = cli.main(["build", "--commitlog", str(tmp_path / "none"), "--out", str(tmp_path / "o"), *given])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"rocketidx build: ConfigError: {blamed}: with {beside}") and "index_num" not in err, err
    assert "bytes is over the 2,147,483,647 a broker can map" in err and not (tmp_path / "o").exists()
    assert load_config(conf, hash_slot_num=1000).hash_slot_num == 1000


@pytest.mark.parametrize("job, args", [("nightly_rebuild", ["--commitlog", "x", "--out", "y", "--window", "abc"]),
                                       ("backfill", ["--store", "x", "--window", "-1h"])])
def test_the_jobs_give_a_usage_error_in_one_line_too(job, args, capsys):
    """Item 15 for spark-submit's entry points: the one-line parser of the command line."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(job, Path(__file__).parents[2] / "jobs" / f"{job}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as e:
        mod.main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith(f"{job}: error: --window: ")
