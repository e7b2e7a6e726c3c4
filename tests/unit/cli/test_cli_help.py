"""What the command line says about itself and echoes back (issue 20, item 10): every command has a
description and every option a help text, build's --master tells how the engine is chosen, query echoes
the cap it applied, demo says when it keeps a store, gen prints a summary (JSON with --json), stats says
plainly when no key hash is shared."""
from __future__ import annotations

import argparse
import json

import pytest

from rocketidx import cli


def subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", ["gen", "build", "query", "verify", "backfill", "demo", "stats", "timeindex"])
def test_every_command_has_a_description_and_every_option_a_help(name):
    p = subcommands()[name]
    assert p.description and len(p.description) > 40, f"{name} has no description"
    bare = [a.option_strings for a in p._actions if a.option_strings and not a.help]
    assert not bare, f"{name}: options without help: {bare}"
    assert " ".join(p.description.split()[:4]) in " ".join(p.format_help().split())


def test_build_help_says_it_runs_in_process_and_backfill_by_size():
    text = " ".join(subcommands()["build"].format_help().split())
    assert "default local[*]" not in text and "engine_break_even" not in text
    assert "does not beat the workers at any size" in text and "size picks no engine for a build" in text
    text = " ".join(subcommands()["backfill"].format_help().split())
    assert "chosen by size" in text and "engine_break_even" in text


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from rocketidx.build.in_process import build_index
    from rocketidx.config import BuildConfig
    from rocketidx.sample.generate import GenConfig, generate_store
    d = tmp_path_factory.mktemp("cli_help")
    generate_store(d / "s", GenConfig(messages=2000))
    build_index(d / "s", d / "o", BuildConfig(hash_slot_num=1000, index_num=10000, timezone="UTC"))
    return d


def test_query_echoes_the_cap_it_applied(small, capsys, tmp_path):
    capsys.readouterr()
    assert cli.main(["query", "--index", str(small / "o"), "--topic", "Topic0", "--key", "K1", "--max", "1000"]) == 0
    assert json.loads(capsys.readouterr().out)["maxNum"] == 64
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"topic": "Topic0", "key": "K1", "maxNum": 500}\n{"topic": "Topic0", "key": "K1", "maxNum": 3}\n')
    assert cli.main(["query", "--index", str(small / "o"), "--queries", str(queries)]) == 0
    assert [json.loads(x)["maxNum"] for x in capsys.readouterr().out.splitlines()] == [64, 3]


def test_gen_prints_a_summary_and_json_only_when_asked(tmp_path, capsys):
    assert cli.main(["gen", "--out", str(tmp_path / "a"), "--messages", "100", "--segment-bytes", "16k"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("wrote 100 messages in ") and out.count("\n") == 1 and "commitlog" in out
    assert cli.main(["gen", "--out", str(tmp_path / "b"), "--messages", "100", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["messages"] == 100


def test_demo_says_when_it_keeps_an_existing_store(tmp_path, capsys):
    from rocketidx.sample.generate import GenConfig, generate_store
    generate_store(tmp_path / "store", GenConfig(messages=1000))
    assert cli.main(["demo", "--dir", str(tmp_path), "--messages", "5000", "--in-process"]) == 0
    err = capsys.readouterr().err
    assert err.strip() == (f"rocketidx demo: --messages 5,000 ignored: {tmp_path / 'store'} already holds 1,000 "
                           f"messages and is kept; delete {tmp_path / 'store'} to generate 5,000")
    assert cli.main(["demo", "--dir", str(tmp_path), "--in-process"]) == 0  # no --messages: nothing to say
    assert cli.main(["demo", "--dir", str(tmp_path), "--messages", "1000", "--in-process"]) == 0  # what it holds
    assert capsys.readouterr().err == ""


def test_stats_says_no_key_hash_is_shared_instead_of_zero_by_zero(small, capsys):
    capsys.readouterr()
    assert cli.main(["stats", "--index", str(small / "o"), "--commitlog", str(small / "s"), "--in-process"]) == 0
    out = capsys.readouterr().out
    assert "0 key hashes are shared by 0" not in out
    assert "no key hash is shared by two keys" in out


def test_the_help_of_the_command_line_and_the_jobs_says_the_exit_codes():
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[3]
    for cmd in ([sys.executable, "-m", "rocketidx", "--help"], [sys.executable, str(root / "jobs/nightly_rebuild.py"),
                "--help"], [sys.executable, str(root / "jobs/backfill.py"), "--help"]):
        out = " ".join(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split())
        for code in ("0 done", "1 the input has problems", "2 could not run", "130 interrupted"):
            assert code in out, (cmd[-2], code)


def test_version_and_verbose_before_or_after_the_command(small, capsys):
    """Issue 31 item 20: ``rocketidx --version`` was "required: command", ``rocketidx build -v`` was
    "unrecognized arguments: -v"."""
    from importlib.metadata import version
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"rocketidx {version('rocketidx')}"
    base = ["build", "--commitlog", "s", "--out", "o"]
    counts = {tuple(argv): cli._parser().parse_args(argv).verbose
              for argv in (base, ["-v", *base], [*base, "-v"], [*base, "-vv"], ["build", "-v", *base[1:]])}
    assert list(counts.values()) == [0, 1, 1, 2, 1]
    assert cli.main(["query", "-v", "--index", str(small / "o"), "--topic", "Topic0", "--key", "K1"]) == 0
