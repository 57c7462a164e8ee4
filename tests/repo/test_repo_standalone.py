"""The repository stands alone: no product file or page points at material outside it, and every
``docs/<page>.md#<anchor>`` cited anywhere (code, configs, README, the docs themselves) names a page
that exists and a heading on it (docs/architecture.md#import-rules, docs/data.md).

The citation check covers the product folders, ``docs/``, ``README.md`` and ``DEMO.md`` (what a user
reads). The tests read data only from inside the repository (docs/data.md#shipped-data), so that a
fresh clone runs them all.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_DIRS = ("trainer", "eval_hooks", "recipes", "launch", "bench", "demos", "conf", "docs")
TOP_FILES = ("README.md", "DEMO.md")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".txt", ".toml", ".cfg", ".jinja", ".json"}
SKIP_PARTS = {"__pycache__", ".git", ".pytest_cache"}
SYSTEM_PAGES = ("scope", "box2", "taste", "medcounterfact", "architecture", "data")

# Names of material that is not in the repository: the reference folder beside it and its documents.
OUTSIDE = re.compile(r"\.\./shared|\bSPEC\.md|\bSPEC\s*§|\bDESIGN\.md|\bSTYLE\.md")
# A docs citation anywhere: docs/<page>.md with an optional #anchor (also ../docs/... from a subfolder).
CITATION = re.compile(r"\bdocs/([A-Za-z0-9_.-]+?\.md)(?:#([A-Za-z0-9_-]*))?")
# A relative Markdown link inside a docs page: [text](page.md#anchor) or [text](#anchor).
MD_LINK = re.compile(r"\]\(([A-Za-z0-9_.-]*?\.md)?(?:#([A-Za-z0-9_-]*))?\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")


def _files(root: Path, dirs, top_files) -> list[Path]:
    out = [root / f for f in top_files if (root / f).is_file()]
    for d in dirs:
        base = root / d
        if base.is_dir():
            out += sorted(p for p in base.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES
                          and not SKIP_PARTS & set(p.relative_to(root).parts))
    return out


def outside_references(root: Path) -> list[str]:
    """``path:line: text`` for every line of a user-facing file that names material outside the repo."""
    hits = []
    for path in _files(root, PRODUCT_DIRS, TOP_FILES):
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return hits


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: rendered text (no backticks, link text only), lower case,
    punctuation other than ``-`` and ``_`` removed, each space replaced by ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Anchors of every ATX heading outside fenced code; repeated slugs get ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    in_fence = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = None if in_fence else HEADING.match(line)
        if m:
            slug = github_slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_citations(root: Path) -> tuple[list[str], int]:
    """(problems, number of anchored citations checked) over product files, tests and the top files."""
    docs = root / "docs"
    cache: dict[Path, set[str] | None] = {}

    def check(where: str, page: Path, anchor: str | None, problems: list[str]) -> bool:
        if page not in cache:
            cache[page] = anchors(page.read_text(encoding="utf-8")) if page.is_file() else None
        if cache[page] is None:
            problems.append(f"{where}: {page.relative_to(root)} does not exist")
        elif anchor is not None and anchor not in cache[page]:
            problems.append(f"{where}: no heading with anchor #{anchor} in {page.relative_to(root)}")
        return anchor is not None

    problems: list[str] = []
    checked = 0
    for path in _files(root, (*PRODUCT_DIRS, "tests"), TOP_FILES):
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), start=1):
            where = f"{path.relative_to(root)}:{n}"
            for m in CITATION.finditer(line):
                checked += check(where, docs / m.group(1), m.group(2), problems)
            if path.parent == docs and path.suffix == ".md":
                for m in MD_LINK.finditer(line):
                    if m.group(1) is None and m.group(2) is None:
                        continue
                    page = docs / m.group(1) if m.group(1) else path
                    checked += check(where, page, m.group(2), problems)
    return problems, checked


# ---------------------------------------------------------------------------------------------
# The repository itself
# ---------------------------------------------------------------------------------------------
def test_nothing_user_facing_points_outside_the_repository():
    hits = outside_references(ROOT)
    assert hits == [], "cite a docs/ page instead:\n" + "\n".join(hits)


def test_every_cited_docs_anchor_resolves():
    problems, checked = broken_citations(ROOT)
    assert problems == [], "\n".join(problems)
    assert checked >= 30, f"only {checked} anchored docs citations found: is the scanner still finding them?"


def test_tests_read_no_data_from_outside_the_repository():
    """No test reads the folder beside the repository (it is absent in a fresh clone) and the data the
    tests read instead is shipped."""
    beside = re.compile(r"\.\./shared|\bparents?\b.*[\"']shared[\"']")
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in sorted((ROOT / "tests").rglob("*.py"))
            if p.name != Path(__file__).name
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1) if beside.search(line)]
    assert hits == [], "\n".join(hits)
    shipped = ("eval_hooks/data/gsm8k_test.jsonl", "eval_hooks/data/LICENSE.gsm8k",
               "eval_hooks/data/medevidence_abstract.jsonl", "eval_hooks/data/LICENSE.medevidence",
               "tests/data/reference/scope_leaderboard.json", "tests/data/reference/tastebench_gpt-5.6-sol_summary.json")
    assert [f for f in shipped if not (ROOT / f).is_file()] == []


def test_the_system_pages_exist():
    for page in SYSTEM_PAGES:
        assert (ROOT / "docs" / f"{page}.md").is_file(), page
    assert {"objective", "condition-weights", "reference-numbers"} <= anchors((ROOT / "docs/scope.md").read_text())


# ---------------------------------------------------------------------------------------------
# The checkers, on planted problems
# ---------------------------------------------------------------------------------------------
def test_github_slug_hand_examples():
    assert github_slug("Reference numbers") == "reference-numbers"
    assert github_slug("From a data file to metrics") == "from-a-data-file-to-metrics"
    assert github_slug("`mist` — MIST quartets (rows)") == "mist--mist-quartets-rows"
    assert github_slug("See [the page](x.md#y), v1.2") == "see-the-page-v12"
    assert github_slug("snake_case and-hyphen") == "snake_case-and-hyphen"
    text = "# Title\n## Data\n```\n## Not a heading\n```\n    ## indented code\n## Data ##\n"
    assert anchors(text) == {"title", "data", "data-1"}


def test_checkers_find_planted_problems(tmp_path):
    d = "docs"  # built up so that this file's own source holds no citation to check
    (tmp_path / "docs").mkdir()
    (tmp_path / "trainer").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Objective\n\nSee [b](b.md#nowhere) and [up](#a-page).\n")
    (tmp_path / "trainer" / "x.py").write_text(
        f'"""Loss ({d}/a.md#objective); see ../shared/SPEC.md and SPEC §1."""\n'
        f"# {d}/a.md#missing-anchor, {d}/c.md, {d}/a.md\n")
    (tmp_path / "tests" / "test_t.py").write_text(f"# reads ../shared data; cites {d}/a.md#gone\n")
    (tmp_path / "README.md").write_text(f"Design in DESIGN.md; data in [{d}]({d}/a.md#objective).\n")

    assert outside_references(tmp_path) == [
        f"README.md:1: Design in DESIGN.md; data in [{d}]({d}/a.md#objective).",
        f'trainer/x.py:1: """Loss ({d}/a.md#objective); see ../shared/SPEC.md and SPEC §1."""',
    ]
    problems, checked = broken_citations(tmp_path)
    assert sorted(problems) == sorted([
        f"{d}/a.md:5: {d}/b.md does not exist",
        f"tests/test_t.py:1: no heading with anchor #gone in {d}/a.md",
        f"trainer/x.py:2: no heading with anchor #missing-anchor in {d}/a.md",
        f"trainer/x.py:2: {d}/c.md does not exist",
    ])
    # anchored: README #objective, a.md #nowhere and #a-page, x.py #objective and #missing-anchor, test #gone
    assert checked == 6
