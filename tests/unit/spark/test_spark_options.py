"""The Spark source's string options parse into the core's split spec, or raise a ConfigError naming the
option (no JVM: only the option object)."""
from __future__ import annotations

import pytest

from rocketidx.errors import ConfigError
from rocketidx.spark.sources.commitlog import SourceOptions, parse_size, parse_time_ms


@pytest.mark.parametrize("options, option", [
    ({"output": "bytes"}, "output"), ({"split_bytes": "0"}, "split_bytes"), ({"split_bytes": "1x"}, "split_bytes"),
    ({"check_crc": "maybe"}, "check_crc"), ({"from_offset": "-1"}, "from_offset"),
    ({"from_offset": "10", "to_offset": "5"}, "to_offset"), ({"from_time": "yesterday"}, "from_time"),
    ({"window": "1 fortnight"}, "window"), ({"batch_records": "0"}, "batch_records"),
    ({"skip_offsets": "9-3"}, "skip_offsets"), ({}, "path"),
])
def test_bad_options_raise_config_error_naming_the_option(options, option):
    with pytest.raises(ConfigError) as e:
        SourceOptions.parse(dict({"path": "/store"} if option != "path" else {}, **options))
    assert e.value.option == option


def test_options_parse_back_from_their_strings():
    o = SourceOptions.parse({"path": "/s", "split_bytes": "64k", "from_time": "2023-11-14T22:13:20Z",
                             "window": "15m", "whole_segments": "4096,0", "skip_offsets": "10-20"})
    assert (o.split_bytes, o.from_time_ms, o.window_ms, o.whole_segments) == (65536, 1_700_000_000_000, 900_000, (0, 4096))
    assert SourceOptions.parse(o.as_options()) == o
    assert parse_size("128m", "x") == 128 * 1024**2 and parse_time_ms("1700000000000", "x") == 1_700_000_000_000
