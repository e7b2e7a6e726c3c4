"""README.md and the command line agree: every flag a ``rocketidx`` command offers in ``--help`` is shown
in the README, and every ``--flag`` the README names exists, for the very command where the README says
which one (a command line, ``rocketidx CMD --flag`` in the prose, a jobs/ script after spark-submit).

The parsers are rocketidx.cli's own (and the jobs' own, caught as they parse), built without a subprocess.
Flags of other tools that the README quotes are listed in OTHER_TOOLS, by tool, so a flag that is nobody's
cannot hide behind loose matching.
"""
from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import pytest

from readme_doc import SPAN, Command, flags, logical_lines, parse_command, read_all, shell_blocks

from rocketidx import cli

ROOT = Path(__file__).resolve().parents[2]
JOBS = ["jobs/nightly_rebuild.py", "jobs/backfill.py"]

# The other tools' flags that the README quotes. A command line of one of these tools may use only its
# listed flags; a flag in the prose that no rocketidx parser has must be one of these.
OTHER_TOOLS: dict[str, set[str]] = {
    # The nightly and backfill recipes: the cluster manager, where Python runs, what executors import.
    "spark-submit": {"--master", "--deploy-mode", "--py-files", "--conf", "--archives"},
    # Kafka's index check, named as verify's counterpart.
    "kafka-dump-log": {"--index-sanity-check"},
    # `make bench` and `make faults` scripts, whose options the Benchmarks section names.
    "bench/bench.py": {"--no-spark"},
    "bench/faults.py": {"--only", "--logs", "--engine-logs"},
    # Remote stores: Hadoop's classpath for libhdfs, and the local S3 server of the runnable example.
    "hadoop": {"--glob"}, "moto_server": set(),
    # Set-up and helpers quoted without long options: anything they gain must be listed here first.
    "make": set(), "pip": set(), "python": set(), "python3": set(), "venv-pack": set(),
}


# Every parser has these; the pages may name them (`rocketidx CMD --help`), none has to.
HELP = {"-h", "--help"}


def options(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    """Each option's strings (``('-v', '--verbose')``), ``--help`` left out: every parser has it."""
    return [tuple(a.option_strings) for a in parser._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    main = cli._parser()
    sub = next(a for a in main._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


class _Parsed(Exception):
    pass


def job_parser(path: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser a jobs/ script builds in its main(), caught when it parses (nothing runs)."""
    spec = importlib.util.spec_from_file_location(Path(path).stem + "_job", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def caught(self, *args, **kw):
        raise _Parsed(self)
    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", caught)
        with pytest.raises(_Parsed) as e:
            module.main([])
    return e.value.args[0]


@pytest.fixture(scope="module")
def readme():
    """README.md and docs/*.md, read as one."""
    return read_all()


def commands(readme) -> list[tuple[Command, str]]:
    """Every command the README shows, with where: command lines of shell blocks, and inline code spans
    that start with a program (``rocketidx query --store``, ``spark-submit --conf``, ``build --strict``)."""
    blocks, paragraphs = readme
    out = [(c, b.where) for b in shell_blocks(blocks)
           for line in logical_lines(b.text) for c in parse_command(line)]
    for p in paragraphs:
        for span in SPAN.findall(p.text):
            if not span.lstrip().startswith("-"):
                out += [(c, p.where) for c in parse_command(span)]
    return out


def owner(command: Command, names: set[str]) -> tuple[str | None, tuple[str, ...]]:
    """(rocketidx subcommand, its arguments) for ``rocketidx CMD ...`` or a span ``CMD --flag``; else None."""
    args = command.args
    if command.program == "rocketidx":
        args = tuple(t for t in args if not t.startswith("-v"))  # the global -v/-vv before the subcommand
        return (args[0], args[1:]) if args and args[0] in names else ("", args)
    if command.program in names and any(t.startswith("--") for t in args):
        return command.program, args
    return None, args


def test_every_flag_the_readme_shows_for_a_command_exists_for_that_command(readme, monkeypatch):
    subs = subcommands()
    known = {name: HELP | {o for opts in options(p) for o in opts} for name, p in subs.items()}
    known[""] = HELP | {o for opts in options(cli._parser()) for o in opts}
    known.update({job: HELP | {o for opts in options(job_parser(job, monkeypatch)) for o in opts} for job in JOBS})
    wrong = []
    for command, where in commands(readme):
        name, args = owner(command, set(subs))
        if name is None:
            name = command.program
            if name not in known and name not in OTHER_TOOLS:
                if flags(" ".join(args)):
                    wrong.append(f"{where}: {name} is neither a rocketidx command nor in OTHER_TOOLS: {command.text}")
                continue
        allowed = known.get(name, OTHER_TOOLS.get(name, set()))
        wrong += [f"{where}: {f} is not a flag of {name or 'rocketidx'}: {command.text}"
                  for f in sorted(flags(" ".join(args)) - allowed)]
    assert wrong == [], "\n".join(wrong)


def test_every_flag_the_readme_names_anywhere_exists(readme, monkeypatch):
    """Prose flags with no command beside them (`--from-time/--to-time`, `--in-process`): some rocketidx
    parser's, or a listed tool's."""
    blocks, paragraphs = readme
    ours = HELP | {o for p in [cli._parser(), *subcommands().values()] + [job_parser(j, monkeypatch) for j in JOBS]
                   for opts in options(p) for o in opts}
    theirs = set().union(*OTHER_TOOLS.values())
    text = "\n".join([b.text for b in shell_blocks(blocks)] + [p.text for p in paragraphs])
    unknown = sorted(flags(text) - ours - theirs)
    assert unknown == [], f"no rocketidx parser and no tool in OTHER_TOOLS has {unknown}"


def documented(readme, name: str, names: set[str]) -> set[str]:
    """Flags of ``name`` the README shows: on its command lines, and anywhere in a section whose heading
    names ``rocketidx NAME`` (backfill lists its flags in prose)."""
    blocks, paragraphs = readme
    shown = set()
    for command, _ in commands(readme):
        cmd, args = owner(command, names)
        if cmd == name:
            shown |= flags(" ".join(args))
    for part in [*blocks, *paragraphs]:
        if any(re.search(rf"rocketidx {name}\b", h) for h in part.headings):
            shown |= flags(part.text)
    return shown


def test_every_flag_in_help_is_in_the_readme(readme):
    subs = subcommands()
    missing = []
    for name, parser in subs.items():
        shown = documented(readme, name, set(subs))
        missing += [f"rocketidx {name} {'/'.join(opts)}" for opts in options(parser) if not shown & set(opts)]
    # The global options (-v) stand before any command: the README may name them anywhere.
    blocks, paragraphs = readme
    spans = {s.strip() for p in paragraphs for s in SPAN.findall(p.text)}
    everywhere = "\n".join([b.text for b in blocks] + [p.text for p in paragraphs])
    for opts in options(cli._parser()):
        if not any(o in spans or f" {o} " in everywhere for o in opts):
            missing.append(f"rocketidx {'/'.join(opts)}")
    assert missing == [], f"--help shows flags README.md does not: {missing}"


def test_the_readme_parser_sees_the_commands_it_should(readme):
    """The checks above are only as good as the parsing: each command's synopsis and the spark-submit
    recipes are found."""
    found = {(owner(c, set(subcommands()))[0] or c.program) for c, _ in commands(readme)}
    assert set(subcommands()) <= found
    assert {"spark-submit", *JOBS} <= found
