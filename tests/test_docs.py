"""The README and docs/ stay a front door and a reference that can be followed.

- README.md is at most 160 lines, and none of its paragraphs is longer than 8 lines. A paragraph
  is a run of consecutive prose lines: outside fenced code blocks, not blank, not a heading, not
  a table row. A list item starts a paragraph of its own, its indented continuation lines belong
  to it, so a long list is many short paragraphs and a long item is one long paragraph.
- Every relative link and image in README.md and docs/*.md names a file or folder of the
  repository; a link's `#anchor` into a Markdown file names one of its headings (GitHub's slugs).
- Every `Note [title]` the pages name is a Note of the code, and `Note [title] in `path`` is where
  the Note is written: a file of this repository, or a file of Caffe's tree that the patch series
  writes the Note into.
- The README states no test count ("N passed"): the test summary says it, and it changes.
- Every number of the README's headline table is a link to a study under results/.
"""
import re
from pathlib import Path

import pytest

from notes import HEADING, notes_written, wrong_note_refs
from repo_paths import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]

LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")


def _rel(page):
    return page.relative_to(REPO).as_posix()


def _prose_lines(text):
    """(line number, line, is code) of a Markdown text, fenced code blocks marked as code."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            yield number, line, True
            continue
        yield number, line, fenced


def paragraphs(text):
    """Each paragraph of a Markdown text as (first line number, its lines), by the rule of the
    module's docstring."""
    found, current = [], None
    for number, line, code in _prose_lines(text):
        stripped = line.strip()
        if code or not stripped or stripped.startswith(("#", "|")):
            current = None
            continue
        if re.match(r"\s*([-*+]|\d+\.)\s", line) or current is None:
            current = (number, [line])
            found.append(current)
        else:
            current[1].append(line)
    return found


def test_paragraph_rule_on_a_sample():
    text = ("para one\nstill one\n\n- item a\n  its second line\n- item b\n"
            "```\ncode\ncode\n```\n| a | b |\nafter the table\n# Heading\nlast\n")
    assert [(n, len(lines)) for n, lines in paragraphs(text)] == [
        (1, 2), (4, 2), (6, 1), (12, 1), (14, 1)]


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 160, f"README.md has {len(lines)} lines; the reference goes to docs/"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_paragraph_over_eight_lines(page):
    long = [(first, len(lines)) for first, lines in paragraphs(page.read_text())
            if len(lines) > 8]
    assert not long, f"{_rel(page)}: paragraphs over 8 lines (first line, lines): {long}"


def test_docs_exist():
    names = {p.name for p in DOCS}
    assert {"caffe.md", "planning.md", "cache.md", "contracts.md", "testing.md", "airgapped.md",
            "performance.md"} <= names, names


def _links(page):
    """(target, line number) of every link and image of a page outside code."""
    for number, line, code in _prose_lines(page.read_text()):
        if code:
            continue
        for m in LINK.finditer(line):
            yield m.group(2), number


def _slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(md):
    return {_slug(line.lstrip("#")) for number, line, code in _prose_lines(md.read_text())
            if not code and re.match(r"#{1,6} ", line)}


def test_slugs_as_github_makes_them():
    assert _slug(" `plan --json`") == "plan---json"
    assert _slug(" Writing a variant: `ucudnn prototxt`") == "writing-a-variant-ucudnn-prototxt"
    assert _slug(" Caffe + ucudnn against PyTorch") == "caffe--ucudnn-against-pytorch"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_relative_links_resolve(page):
    broken, checked = [], 0
    for target, number in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):      # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        checked += 1
        if REPO.resolve() not in (where, *where.parents) or not where.exists():
            broken.append((number, target))
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            broken.append((number, target, "no such heading"))
    assert not broken, f"{_rel(page)}: links that do not resolve: {broken}"
    if page == README:
        assert checked >= 10


def test_note_headings_found_as_written():
    code = "x = 1\n# Note [A title]\n#   text\n  // Note [Other]\n * Note [Third]:\nsee Note [A title]"
    assert HEADING.findall(code) == ["A title", "Other", "Third"]


def test_notes_are_where_the_pages_say():
    wrong, checked = wrong_note_refs(PAGES, notes_written())
    assert not wrong, wrong
    assert checked >= 40


def test_readme_states_no_test_count():
    counts = re.findall(r"\b\d[\d,]*\s+(?:passed|failed|skipped|xfailed|errors?|tests?)\b",
                        README.read_text())
    assert not counts, counts


def _headline_rows():
    text = README.read_text()
    section = re.search(r"^## Headline.*?$(.*?)^## ", text, re.S | re.M)
    assert section, "README.md has a section '## Headline ...'"
    rows = [l for l in section.group(1).splitlines() if l.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def test_headline_numbers_link_to_their_studies():
    """Each cell after the first (the net and its batch) is a link to a study under results/,
    and no number of it stands outside a link."""
    rows = _headline_rows()
    assert len(rows) >= 4, rows
    for cells in rows:
        for cell in cells[1:]:
            links = LINK.findall(cell)
            assert links, (cells[0], cell)
            assert all(re.match(r"results/[^/]+/[^/]+/", target) for _, target in links), cell
            assert all(re.search(r"\d", text) for text, _ in links), cell
            assert not re.search(r"\d", LINK.sub("", cell)), (cells[0], cell)
