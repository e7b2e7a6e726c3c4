"""The pages (README.md and docs/*.md) and the command line agree:

* every flag a ``rocketidx`` command, the global parser or a jobs/ script offers in ``--help`` has a row in
  that command's flag table in docs/cli.md (the section whose heading names ``rocketidx CMD``, ``rocketidx``
  or ``jobs/x.py``);
* every ``--flag`` the pages name exists, for the very command where they say which one (a command line,
  ``rocketidx CMD --flag`` in the prose, a jobs/ script after spark-submit, a row of a command's table);
* README.md stays a page a newcomer finishes: at most 200 lines, one example per command, the exit-code
  map, and a link to every page of the manual; every link between the pages resolves.

The parsers are rocketidx.cli's own (and the jobs' own, caught as they parse), built without a subprocess.
Flags of other tools that the pages quote are listed in OTHER_TOOLS, by tool, so a flag that is nobody's
cannot hide behind loose matching.
"""
from __future__ import annotations

import argparse
import importlib.util
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from readme_doc import (DOCS, README, SPAN, Command, flags, logical_lines, markdown_files, parse_command, read_all,
                        read_markdown, shell_blocks, shown, table_rows)

from rocketidx import cli

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = DOCS / "cli.md"
JOBS = ["jobs/nightly_rebuild.py", "jobs/backfill.py"]
README_MAX_LINES = 200
# The commands the README shows an example of (gen and demo are named in its prose; make run runs demo).
README_EXAMPLES = {"build", "backfill", "verify", "query", "stats", "timeindex", "spark-submit", "jobs/nightly_rebuild.py"}
EXIT_CODES = {"0", "1", "2", "130", "141"}

# The other tools' flags that the pages quote. A command line of one of these tools may use only its
# listed flags; a flag in the prose that no rocketidx parser has must be one of these.
OTHER_TOOLS: dict[str, set[str]] = {
    # The nightly and backfill recipes: the cluster manager, where Python runs, what executors import.
    "spark-submit": {"--master", "--deploy-mode", "--py-files", "--conf", "--archives"},
    # Kafka's index check, named as verify's counterpart.
    "kafka-dump-log": {"--index-sanity-check"},
    # `make bench` and `make faults` scripts, whose options docs/benchmarks.md names.
    "bench/speed/bench.py": {"--no-spark"},
    "bench/speed/bench_pair.py": {"--old", "--store", "--rounds", "--engines"},
    "bench/speed/bench_targets.py": {"--rounds"},
    "bench/speed/bench_workers.py": {"--rounds", "--workers", "--oracle-build"},
    "bench/speed/bench_engine.py": {"--only", "--repeat"},
    "bench/speed/bench_incremental.py": {"--targets", "--skip-spark", "--rounds"},
    "bench/campaigns/faults.py": {"--only", "--logs", "--engine-logs", "--queue-cases", "--store-cases", "--repair-kills",
                        "--executor-kills", "--index-loss-cases"},
    # The real-broker scripts of `make brokers` (tests/brokers/) that the pages quote.
    "brokers.redispatch": {"--set"},
    "brokers.matrix": {"--build-args"},
    # Remote stores: Hadoop's classpath for libhdfs, and the local S3 server of the runnable example.
    "hadoop": {"--glob"}, "moto_server": set(),
    # Set-up and helpers quoted without long options: anything they gain must be listed here first.
    "make": set(), "pip": set(), "python": set(), "python3": set(), "venv-pack": set(),
}

# Every parser has these; the pages may name them (`rocketidx CMD --help`), none has to.
HELP = {"-h", "--help"}

# A heading names the parser its section documents: `rocketidx`, `rocketidx build`, `jobs/backfill.py`.
SECTION = re.compile(r"`(rocketidx(?: [a-z]+)?|jobs/\w+\.py)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def options(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    """Each option's strings (``('-v', '--verbose')``), ``--help`` left out: every parser has it."""
    return [tuple(a.option_strings) for a in parser._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)]


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return HELP | {o for opts in options(parser) for o in opts}


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


def all_parsers(monkeypatch) -> dict[str, argparse.ArgumentParser]:
    """Every parser by the name its docs/cli.md section carries: ``rocketidx`` (the options before the
    command), ``rocketidx CMD``, ``jobs/x.py``."""
    parsers = {"rocketidx": cli._parser()}
    parsers.update({f"rocketidx {name}": p for name, p in subcommands().items()})
    parsers.update({job: job_parser(job, monkeypatch) for job in JOBS})
    return parsers


@pytest.fixture(scope="module")
def pages():
    """README.md and docs/*.md, read as one."""
    return read_all()


def commands(pages) -> list[tuple[Command, str]]:
    """Every command the pages show, with where: command lines of shell blocks, and inline code spans
    that start with a program (``rocketidx query --store``, ``spark-submit --conf``, ``build --strict``)."""
    blocks, paragraphs = pages
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


def flag_tables(path: Path = CLI_MD) -> dict[str, list[tuple[int, set[str]]]]:
    """docs/cli.md's flag tables: per section (the innermost heading naming a parser), each row's line and
    the flags of its first cell."""
    _, paragraphs = read_markdown(path)
    tables: dict[str, list[tuple[int, set[str]]]] = defaultdict(list)
    for p, cells in table_rows(paragraphs):
        names = [n for h in p.headings for n in SECTION.findall(h)]
        if names and flags(cells[0]):
            tables[names[-1]].append((p.line, flags(cells[0])))
    return tables


def undocumented_flags(parsers: dict[str, argparse.ArgumentParser], path: Path = CLI_MD) -> list[str]:
    """The options of each parser that no row of its section's tables names."""
    tables = flag_tables(path)
    missing = []
    for name, parser in parsers.items():
        rows = set().union(*(f for _, f in tables.get(name, [])))
        missing += [f"{name} {'/'.join(opts)}" for opts in options(parser) if not rows & set(opts)]
    return missing


def unknown_table_flags(parsers: dict[str, argparse.ArgumentParser], path: Path = CLI_MD) -> list[str]:
    """Table rows that name a flag their section's parser does not have (or a section of no parser)."""
    wrong = []
    for name, rows in flag_tables(path).items():
        known = option_strings(parsers[name]) if name in parsers else set()
        wrong += [f"{shown(path)} line {line}: {f} is not a flag of {name}"
                  for line, found in rows for f in sorted(found - known)]
    return wrong


def test_every_flag_the_pages_show_for_a_command_exists_for_that_command(pages, monkeypatch):
    subs = subcommands()
    known = {name: option_strings(p) for name, p in subs.items()}
    known[""] = option_strings(cli._parser())
    known.update({job: option_strings(job_parser(job, monkeypatch)) for job in JOBS})
    wrong = []
    for command, where in commands(pages):
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


def test_every_flag_in_a_cli_md_table_belongs_to_its_section(monkeypatch):
    assert unknown_table_flags(all_parsers(monkeypatch)) == []


def test_every_flag_the_pages_name_anywhere_exists(pages, monkeypatch):
    """Prose flags with no command beside them (`--from-time/--to-time`, `--in-process`): some rocketidx
    parser's, or a listed tool's."""
    blocks, paragraphs = pages
    ours = set().union(*(option_strings(p) for p in all_parsers(monkeypatch).values()))
    theirs = set().union(*OTHER_TOOLS.values())
    text = "\n".join([b.text for b in shell_blocks(blocks)] + [p.text for p in paragraphs])
    unknown = sorted(flags(text) - ours - theirs)
    assert unknown == [], f"no rocketidx parser and no tool in OTHER_TOOLS has {unknown}"


def test_every_flag_in_help_is_in_docs_cli_md(monkeypatch):
    missing = undocumented_flags(all_parsers(monkeypatch))
    assert missing == [], f"--help shows flags docs/cli.md's tables do not: {missing}"


def test_the_checks_catch_a_flag_left_out_or_made_up(tmp_path, monkeypatch):
    """The two checks above can fail: a copy of docs/cli.md without build's --time-index row, and with a
    row for a flag build does not have."""
    parsers = all_parsers(monkeypatch)
    text = CLI_MD.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `--time-index"))
    build_rows = text.index("## `rocketidx build`")
    edited = text[:build_rows] + text[build_rows:].replace(row + "\n", "| `--time-slice T` | none | made up |\n", 1)
    copy = tmp_path / "cli.md"
    copy.write_text(edited)
    assert undocumented_flags(parsers, CLI_MD) == []
    assert undocumented_flags(parsers, copy) == ["rocketidx build --time-index"]
    assert [w.split(": ", 1)[1] for w in unknown_table_flags(parsers, copy)] == [
        "--time-slice is not a flag of rocketidx build"]


def test_the_page_parser_sees_the_commands_it_should(pages):
    """The checks above are only as good as the parsing: each command's synopsis and the spark-submit
    recipes are found, and docs/cli.md has a flag table for every parser."""
    found = {(owner(c, set(subcommands()))[0] or c.program) for c, _ in commands(pages)}
    assert set(subcommands()) <= found
    assert {"spark-submit", *JOBS} <= found
    assert set(flag_tables()) == {"rocketidx", *(f"rocketidx {n}" for n in subcommands()), *JOBS}


def test_the_readme_is_one_page_with_an_example_per_command_and_a_link_to_every_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move the detail into docs/"
    readme = read_markdown(README)
    shown_here = {(owner(c, set(subcommands()))[0] or c.program) for c, _ in commands(readme)}
    assert README_EXAMPLES <= shown_here, f"README.md shows no example of {sorted(README_EXAMPLES - shown_here)}"
    linked = {(README.parent / t.split("#")[0]).resolve() for t in LINK.findall(README.read_text())}
    unlinked = [shown(p) for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert unlinked == [], f"README.md does not link {unlinked}"
    codes = {cells[0] for p, cells in table_rows(readme[1]) if any("Exit codes" in h for h in p.headings)}
    assert codes - {"code", "---"} == EXIT_CODES


@pytest.mark.slow
def test_the_readme_query_example_finds_messages_in_the_sample_make_run_makes(tmp_path, monkeypatch, capsys):
    """Issue 31 item 10: README's build and query examples, run as written (relative paths) on the sample
    `make run` generates (`rocketidx demo`: 300,000 messages from seed 1), find the key's messages; the
    example's `--key K1` found none on Topic0."""
    readme = [c for b in shell_blocks(read_markdown(README)[0]) for line in logical_lines(b.text)
              for c in parse_command(line) if c.program == "rocketidx"]
    build = next(c for c in readme if c.args[0] == "build" and "sample/store" in c.args and "--targets" not in c.args)
    query = next(c for c in readme if c.args[0] == "query")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["demo", "--dir", "sample", "--in-process"]) == 0
    assert cli.main(list(build.args)) == 0
    capsys.readouterr()
    assert cli.main(list(query.args)) == 0
    out = capsys.readouterr().out
    key = query.args[query.args.index("--key") + 1]
    found = int(re.match(r"^\S+#\S+: (\d+) message\(s\)", out).group(1))
    carrying = [line for line in out.splitlines() if line.strip().startswith("keys ") and key in line.split("'")[1].split()]
    assert found > 0 and len(carrying) == found, out


def slugs(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a page: lower case, punctuation dropped, spaces to
    hyphens, a repeated one numbered (``-1``, ``-2``)."""
    seen: Counter[str] = Counter()
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            base = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return out


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(shown(p)))
def test_every_link_between_the_pages_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s):, mailto: and the like: not ours to check offline
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in slugs(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert broken == [], f"{shown(page)}: {broken}"
