"""README.md and the manual (docs/*.md) read the way their tests need them: fenced blocks and prose
paragraphs with the file and headings they sit under, shell command lines (continuations joined, comments
dropped) split into the program that runs and its arguments, and the inline code spans of the prose.

Used by tests/docs/test_readme_flags.py (every flag shown is real, every real flag is in docs/cli.md),
tests/spark/test_readme_recipe.py (the local spark-submit recipe runs as written) and
tests/docs/test_readme_remote_example.py (so does the remote-store example).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# A long flag: `--hash-slots`, also inside `--from-time/--to-time` and `[--json]`.
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
FENCE = re.compile(r"^\s*```\s*(\S*)")
SPAN = re.compile(r"`([^`]+)`")
JOB = re.compile(r"^jobs/\w+\.py$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def shown(path: Path) -> Path:
    """A page's path as messages show it: relative to the checkout when it is one of its pages."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


@dataclass(frozen=True)
class Block:
    """One fenced block: its language tag, text, the headings above it (outermost first), its file and
    first line."""
    lang: str
    text: str
    headings: tuple[str, ...]
    line: int
    path: Path = README

    @property
    def where(self) -> str:
        return f"{shown(self.path)} line {self.line}"


@dataclass(frozen=True)
class Paragraph:
    """Prose between blank lines (a list or a table counts as one), its lines joined with spaces: an inline
    code span may break across lines. ``lines`` keeps them apart, for a table's rows."""
    text: str
    headings: tuple[str, ...]
    line: int
    path: Path = README
    lines: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{shown(self.path)} paragraph at line {self.line}"


@dataclass(frozen=True)
class Command:
    """One shell command: ``program`` is what runs (``rocketidx``, ``spark-submit``, ``jobs/backfill.py``,
    ``make``...), ``args`` the tokens after it."""
    program: str
    args: tuple[str, ...]
    text: str


def markdown_files() -> list[Path]:
    """README.md, then the manual's pages in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def read_markdown(path: Path = README) -> tuple[list[Block], list[Paragraph]]:
    blocks: list[Block] = []
    paragraphs: list[Paragraph] = []
    headings: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    fence: tuple[str, int, list[str]] | None = None
    para: list[str] = []
    para_line = 0

    def end_paragraph() -> None:
        if para:
            paragraphs.append(Paragraph(" ".join(s.strip() for s in para), tuple(h for _, h in headings), para_line,
                                        path, tuple(para)))
            para.clear()

    for n, line in enumerate(lines, 1):
        if fence is not None:
            if FENCE.match(line):
                blocks.append(Block(fence[0], "\n".join(fence[2]), tuple(h for _, h in headings), fence[1], path))
                fence = None
            else:
                fence[2].append(line)
            continue
        m = FENCE.match(line)
        if m:
            end_paragraph()
            fence = (m.group(1), n + 1, [])
            continue
        h = HEADING.match(line)
        if h:
            end_paragraph()
            level = len(h.group(1))
            headings = [(lv, t) for lv, t in headings if lv < level] + [(level, h.group(2))]
            continue
        if not line.strip():
            end_paragraph()
            continue
        if not para:
            para_line = n
        para.append(line)
    end_paragraph()
    assert fence is None, f"{path}: a fenced block opened at line {fence[1] - 1} never closes"
    return blocks, paragraphs


def read_all() -> tuple[list[Block], list[Paragraph]]:
    """Every block and paragraph of README.md and docs/*.md."""
    blocks: list[Block] = []
    paragraphs: list[Paragraph] = []
    for path in markdown_files():
        b, p = read_markdown(path)
        blocks += b
        paragraphs += p
    return blocks, paragraphs


def logical_lines(text: str) -> list[str]:
    """A shell block's commands: comments dropped, a trailing backslash or an indented next line (the
    README's synopsis style) continues the command."""
    out: list[str] = []
    joining = False
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()  # `env.tar.gz#env` is no comment: # after a space only
        if not line.strip():
            joining = False
            continue
        continues = line.endswith("\\")
        line = line[:-1].rstrip() if continues else line
        if out and (joining or raw[:1].isspace()):
            out[-1] += " " + line.strip()
        else:
            out.append(line.strip())
        joining = continues
    return out


def parse_command(text: str) -> list[Command]:
    """The programs a command line runs, with their arguments. ``spark-submit ... jobs/x.py ARGS`` is two:
    spark-submit with its own options, and the job with ARGS; ``python script.py ARGS`` is the script."""
    tokens = text.split()
    while tokens and (tokens[0] == "export" or ASSIGNMENT.match(tokens[0])):
        tokens = tokens[1:]
    if not tokens:
        return []
    program, args = tokens[0].rsplit("/", 1)[-1] if tokens[0].startswith(".venv/") else tokens[0], tokens[1:]
    if program.startswith("python"):
        scripts = [i for i, t in enumerate(args) if t.endswith(".py") and not t.startswith("-")]
        if scripts and "-c" not in args[:scripts[0]]:
            return [Command(args[scripts[0]], tuple(args[scripts[0] + 1:]), text)]
        return [Command(program, tuple(args), text)]
    if program == "spark-submit":
        jobs = [i for i, t in enumerate(args) if JOB.match(t)]
        if jobs:
            i = jobs[0]
            return [Command(program, tuple(args[:i]), text), Command(args[i], tuple(args[i + 1:]), text)]
    return [Command(program, tuple(args), text)]


def table_rows(paragraphs: list[Paragraph]) -> list[tuple[Paragraph, list[str]]]:
    """Each table row of the prose, with its paragraph and its cells (the header and ``|---|`` rows too)."""
    return [(p, [c.strip() for c in line.strip().strip("|").split("|")])
            for p in paragraphs for line in p.lines if line.lstrip().startswith("|")]


def shell_blocks(blocks: list[Block]) -> list[Block]:
    return [b for b in blocks if b.lang in ("sh", "bash", "shell", "console")]


def flags(text: str) -> set[str]:
    return set(FLAG.findall(text))
