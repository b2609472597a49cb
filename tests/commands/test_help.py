"""Every command's ``--help`` reads as whole sentences: no option without a description, no description
and no group title that stops mid-sentence.

The commands are taken from the command table (:data:`nerf_lightning.commands.MODULES`) and from
LightningCLI's subcommands, and each ``--help`` runs in this process (``main([..., "--help"])``, its
output captured). The help is read as argparse prints it: text outside groups (the description,
an epilog), group headings (``title:`` at the margin, followed by indented lines), a group's
description (its first indented block when a blank line separates it from the options) and its
entries (an invocation, two spaces or more, its help; wrapped lines indented further).

The rules:

* a description is the entry's help with its wrapped lines joined, less the ``(required, type: ...,
  default: ...)`` jsonargparse appends; it must not be empty, and its last character must be one of
  ``. ) : ` ' " ! ?`` (a paragraph of text outside groups and a group's description likewise);
* a group title (the heading less argparse's ``:``) is one sentence whose full stop jsonargparse
  drops, so it cannot be judged by its last character; it ends mid-sentence when it holds a sentence
  end followed by more text, leaves a bracket or a backtick pair open, ends in ``, ; - /`` or a word
  that cannot end a sentence (:data:`OPEN_WORDS`), or is the first line of a docstring whose first
  sentence goes on to the next line (jsonargparse titles a group with a docstring's first line).

Lightning's own texts are held to the same rules, and pass them (``--trainer.*`` included).
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from dataclasses import dataclass, field

import pytest

from nerf_lightning.commands import MODULES, commands
from nerf_lightning.commands.lightning import NerfCLI
from nerf_lightning.pipeline.config import STAGES
from tests.helpers.runs import printed_and_exited

LIGHTNING = list(NerfCLI.subcommands())
"""``fit``, ``validate``, ``test``, ``predict``."""
OURS = [command.name for word in MODULES for command in commands(word)]
GROUPS = [word for word in MODULES if [command.name for command in commands(word)] != [word]]
"""The first words that name a group of commands (``data``), each with its own listing."""

COMMAND_LINES = [
    pytest.param([], id="top", marks=pytest.mark.slow),  # LightningCLI's parser prints it
    *(pytest.param([name], id=name, marks=pytest.mark.slow) for name in LIGHTNING),
    *(pytest.param([word], id=word) for word in GROUPS),
    *(pytest.param(name.split(), id=name) for name in OURS),
]

SENTENCE_ENDS = (".", ")", ":", "`", "'", '"', "!", "?")
OPEN_WORDS = frozenset((
    "a", "an", "the", "of", "to", "in", "on", "at", "by", "for", "from", "with", "into", "onto", "than", "as",
    "and", "or", "but", "nor", "if", "when", "while", "that", "which", "whose", "your", "our", "their", "its",
    "my", "every", "each", "any", "some", "no", "not", "is", "are", "be",
))
"""Words a sentence does not end with: a title ending in one was cut."""

_SUFFIX = re.compile(r" \((?:required|type: |default: )")


@dataclass
class Help:
    """A ``--help`` text as argparse lays it out."""

    text: list[str] = field(default_factory=list)  # paragraphs outside groups, lines joined
    titles: list[str] = field(default_factory=list)
    descriptions: list[tuple[str, str]] = field(default_factory=list)  # (title, description)
    entries: list[tuple[str, str, str]] = field(default_factory=list)  # (title, invocation, help)


def _parse(output: str) -> Help:
    lines = output.splitlines()
    start = 0
    if lines and lines[0].startswith("usage:"):
        while start < len(lines) and lines[start].strip():
            start += 1
    found = Help()
    sections: list[tuple[str, list[list[str]]]] = []  # (title, its indented blocks)
    paragraph: list[str] = []
    for index in range(start, len(lines)):
        line = lines[index]
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if not line.strip():
            if paragraph:
                found.text.append(" ".join(paragraph))
                paragraph = []
            if sections and sections[-1][1][-1]:
                sections[-1][1].append([])
        elif not line.startswith(" "):
            if line.endswith(":") and following.startswith(" "):
                sections.append((line[:-1], [[]]))
                found.titles.append(line[:-1])
            else:
                paragraph.append(line.strip())
        else:
            if not sections:
                sections.append(("", [[]]))  # a listing before any heading (``data --help``)
            sections[-1][1][-1].append(line)
    if paragraph:
        found.text.append(" ".join(paragraph))
    for title, blocks in sections:
        blocks = [block for block in blocks if block]
        if len(blocks) > 1:  # argparse separates a group's description from its options by a blank line
            found.descriptions.append((title, " ".join(line.strip() for line in blocks[0])))
            blocks = blocks[1:]
        for line in (line for block in blocks for line in block):
            if len(line) - len(line.lstrip()) <= 4:  # an entry (4: a subcommand under its list)
                parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
                found.entries.append((title, parts[0], parts[1] if len(parts) > 1 else ""))
            elif found.entries:  # a wrapped line of the last entry's help
                title_, invocation, help_text = found.entries[-1]
                found.entries[-1] = (title_, invocation, f"{help_text} {line.strip()}".strip())
    return found


def _closes_at_end(text: str, opening: int) -> bool:
    """Whether the bracket at ``opening`` is closed by the last character of ``text``."""
    depth = 0
    for index in range(opening, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index == len(text) - 1
    return False


def description(help_text: str) -> str:
    """``help_text`` less jsonargparse's ``(required, type: ..., default: ...)`` at its end."""
    text = " " + help_text.strip()
    for match in _SUFFIX.finditer(text):
        if _closes_at_end(text, match.start() + 1):
            return text[: match.start()].strip()
    return text.strip()


def ends_a_sentence(text: str) -> bool:
    return bool(text) and text.endswith(SENTENCE_ENDS)


@functools.cache
def cut_first_lines() -> frozenset[str]:
    """The first lines, less a full stop, of the docstrings (classes, their methods, functions) of the
    loaded ``nerf_lightning`` and ``lightning.pytorch`` modules whose first sentence goes on to the
    next line."""
    cut = set()
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("nerf_lightning", "lightning.pytorch")):
            continue
        for value in list(vars(module).values()):
            members = list(vars(value).values()) if inspect.isclass(value) else []
            for each in (value, *members):
                if not (inspect.isclass(each) or inspect.isfunction(each)) or not each.__doc__:
                    continue
                first = inspect.cleandoc(each.__doc__).split("\n\n", 1)[0].splitlines()
                if len(first) > 1 and not first[0].rstrip().endswith((".", "!", "?", ":")):
                    cut.add(first[0].strip())
    return frozenset(cut)


def title_problem(title: str) -> str | None:
    """Why ``title`` ends mid-sentence, or ``None`` (the rules: the module docstring)."""
    if re.search(r"(?<!\be\.g)(?<!\bi\.e)[.!?]\s+\S", title):
        return "a second sentence, unfinished"
    if title.count("(") != title.count(")") or title.count("[") != title.count("]") or title.count("`") % 2:
        return "a bracket or a backtick left open"
    words = title.rstrip().split()
    if title.rstrip().endswith((",", ";", "-", "/")) or (words and words[-1].lower() in OPEN_WORDS):
        return "ends in a word that cannot end a sentence"
    if title.strip() in cut_first_lines():
        return "the first line of a docstring whose first sentence goes on"
    return None


def _help(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    return printed_and_exited([*args, "--help"], capsys)


@pytest.mark.parametrize("args", COMMAND_LINES)
def test_help_reads_as_whole_sentences(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    command = " ".join(["nerf-lightning", *args])
    found = _parse(_help(args, capsys))
    assert found.entries, f"{command} --help: no options found; the parse of its help is wrong"
    problems = []
    for paragraph in found.text:
        if not ends_a_sentence(paragraph):
            problems.append(f"text ends mid-sentence: ...{paragraph[-70:]!r}")
    for title in found.titles:
        why = title_problem(title)
        if why is not None:
            problems.append(f"group title {title!r}: {why}")
    for title, text in found.descriptions:
        if not ends_a_sentence(text):
            problems.append(f"group {title!r}: description ends mid-sentence: ...{text[-70:]!r}")
    for _, invocation, help_text in found.entries:
        if invocation.endswith(":"):  # argparse's "Available subcommands:" line heads the list below it
            continue
        text = description(help_text)
        if not text:
            problems.append(f"{invocation}: no description")
        elif not ends_a_sentence(text):
            problems.append(f"{invocation}: description ends mid-sentence: ...{text[-70:]!r}")
    assert not problems, f"{command} --help:\n" + "\n".join(problems)


@pytest.mark.slow  # LightningCLI's parser prints it
def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    listed = {invocation for _, invocation, _ in _parse(_help([], capsys)).entries}
    assert set(OURS) | set(LIGHTNING) <= listed, sorted(set(OURS) | set(LIGHTNING) - listed)


def test_pipeline_help_names_its_stages_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(_parse(_help(["pipeline"], capsys)).text)
    assert " -> ".join(STAGES) in text


@pytest.mark.parametrize(
    ("help_text", "expected"),
    [
        ("the radiance field. (type: int, default: 0)", "the radiance field."),
        ("(type: int, default: 0)", ""),
        ("the run's config (default: the checkpoint's run) (type: str | null, default: null)",
         "the run's config (default: the checkpoint's run)"),
        ("the folder. (required, type: <class 'Path'>)", "the folder."),
        ("colour (type: tuple[float, float, float], default: (1.0, 1.0, 1.0))", "colour"),
    ],
)
def test_description_leaves_out_what_jsonargparse_appends(help_text: str, expected: str) -> None:
    assert description(help_text) == expected


@pytest.mark.parametrize(
    ("title", "cut"),
    [
        ("Trains ``field`` on rays placed by ``sampler`` and composited by ``renderer``", False),
        ("Perform one evaluation epoch over the test set. It's separated from fit to make sure you "
         "never run on your", True),
        ("Writes every image ``predict`` renders into ``output_dir`` (default: the run's log "
         "directory", True),
        ("Keeps the best checkpoints by the monitored metric and refreshes ``last.ckpt`` every", True),
        ("Run inference on your data. This will call the model forward function to compute "
         "predictions. Useful to", True),
    ],
)
def test_the_title_rule_catches_the_cut_titles(title: str, cut: bool) -> None:
    assert (title_problem(title) is not None) is cut
