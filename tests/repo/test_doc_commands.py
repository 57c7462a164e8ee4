"""Every command the docs give parses (issue 42 #16): README and docs/real_model.md gave
``real.stages.grpo=[trainer.max_steps=N]``, which Hydra rejects (an unquoted ``=`` inside a list element).

Each ``python recipes/<name>.py ...`` command of README.md, DEMO.md and docs/*.md (code blocks and inline code,
continuation lines joined) names an existing recipe, and each of its overrides parses with Hydra's own override
parser; so does every inline override whose value is a list (``key=[...]``), quoted as a shell would read it.
Placeholders (``<base>``, ``N``) stand for a value; ``...`` for the rest of a command."""

from __future__ import annotations

import re
import shlex

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from recipe_utils import ROOT, compose

DOCS = sorted(["README.md", "DEMO.md", *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))])
COMMAND = re.compile(r"python3? recipes/[\w/]+\.py[^`\n]*")
# inline code: a Hydra key (dotted, or the span quoted for the shell) set to a list (a Python call's keyword list,
# TRL's loss_type=["sigmoid", "sft"], is no override)
LIST_OVERRIDE = re.compile(r"`(\"[\w.<>@/+~-]+=\[[^`]*\]\"|[\w<>@/+~-]+\.[\w.<>@/+~-]+=\[[^`]*\])`")
SHELL_WORDS = {"|", "||", "&&", ";", ">", ">>", "2>&1", "...", "&"}


def _placeholders(text: str) -> str:
    """A doc's placeholders as values: ``<served name>`` -> X, a lone ``N`` (a number to choose) -> 3."""
    return re.sub(r"(?<=[=,'\[])N(?=[\]',\s\"]|$)", "3", re.sub(r"<[^<>]*>", "X", text))


def _commands(path: str) -> list[tuple[int, str]]:
    """``(line, command)`` of every ``python recipes/...`` command in ``path``."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / path).read_text(encoding="utf-8"))
    return [(i, m.group(0)) for i, line in enumerate(text.splitlines(), 1) for m in COMMAND.finditer(line)]


def _overrides(command: str) -> list[str]:
    words = shlex.split(_placeholders(command), comments=True)
    return [w for w in words[2:] if not w.startswith("-") and w not in SHELL_WORDS]


def _unparsed(overrides: list[str]) -> list[str]:
    parser = OverridesParser.create()
    bad = []
    for o in overrides:
        try:
            parser.parse_overrides([o])
        except Exception as e:  # noqa: BLE001 - Hydra's OverrideParseException and the lexer's own errors
            bad.append(f"{o!r}: {type(e).__name__}: {str(e).splitlines()[0]}")
    return bad


@pytest.mark.parametrize("doc", DOCS)
def test_every_recipe_command_in_the_docs_parses(doc):
    found = _commands(doc)
    problems = []
    for line, command in found:
        script = command.split()[1]
        if not (ROOT / script).is_file():
            problems.append(f"{doc}:{line}: {script} does not exist")
        problems += [f"{doc}:{line}: {b}" for b in _unparsed(_overrides(command))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS)
def test_every_list_override_in_the_docs_parses(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    problems = []
    for m in LIST_OVERRIDE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        try:
            words = shlex.split(_placeholders(m.group(1)))
        except ValueError as e:
            problems.append(f"{doc}:{line}: {m.group(1)}: {e}")
            continue
        if len(words) != 1:
            problems.append(f"{doc}:{line}: {m.group(1)} is {len(words)} shell words: quote it")
        problems += [f"{doc}:{line}: {b}" for b in _unparsed(words)]
    assert not problems, "\n".join(problems)


def test_the_documented_stage_overrides_set_the_demo_s_lists():
    """The quoted forms README and docs/real_model.md give set what they say on the demo's config."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    real = (ROOT / "docs" / "real_model.md").read_text(encoding="utf-8")
    grpo = "\"real.stages.grpo=['trainer.max_steps=N']\""
    knowledge = "\"real.stages.knowledge=['knowledge.score=combined','knowledge.k=4','knowledge.temperature=0.7']\""
    assert grpo in readme and grpo in real and knowledge in real
    from demos.config import register

    register()
    cfg = compose("demo", [*shlex.split(_placeholders(grpo)), *shlex.split(knowledge)])
    assert list(cfg.real.stages.grpo) == ["trainer.max_steps=3"]
    assert list(cfg.real.stages.knowledge) == ["knowledge.score=combined", "knowledge.k=4", "knowledge.temperature=0.7"]


def test_a_bad_override_is_caught():
    """The check itself: the form the docs gave fails, the quoted one passes."""
    assert _unparsed(["real.stages.grpo=[trainer.max_steps=3]"])
    assert not _unparsed(["real.stages.grpo=['trainer.max_steps=3']"])
