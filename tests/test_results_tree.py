"""results/ is an index of studies: no code in it, every link of its READMEs resolves, every
study is reached from results/README.md, the Notes its READMEs cite are where they say, and the
other tests read their data from tests/data, never from results/."""
import re
from pathlib import Path

import pytest

from notes import notes_written, wrong_note_refs
from repo_paths import REPO

RESULTS = REPO / "results"
TESTS = REPO / "tests"
INDEX = RESULTS / "README.md"
#: what a script that ran once is: git history keeps it, the tree does not
CODE_SUFFIXES = {".sh", ".py", ".patch", ".diff", ".cu", ".c", ".cpp", ".pyx"}
#: a Markdown link or image: [text](target) or ![alt](target "title")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
#: a string literal that builds a path under results/: "results" as a path part
#: (REPO / "results", os.path.join(root, 'results')) or a literal that starts with results/
READS_RESULTS = re.compile(r"""(?<![\w.])[rbf]?["']results(?:["']|/)""")
#: a string that is the pattern of a regular expression (it matches paths, it opens none)
PATTERN = re.compile(r"""\bre\.(?:match|fullmatch|search|compile|findall|sub)\(\s*[rbf]?["']results""")


def reads_results(line: str) -> bool:
    """Whether a line of a test builds a path under results/ (not a comment, not a regex)."""
    return bool(READS_RESULTS.search(PATTERN.sub("", line)))


def _links(readme: Path) -> list[str]:
    return [t for t in LINK.findall(readme.read_text(encoding="utf-8"))
            if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def _target(readme: Path, link: str) -> Path:
    return (readme.parent / link.split("#", 1)[0]).resolve()


def _readmes() -> list[Path]:
    return sorted(RESULTS.rglob("README.md"))


def test_results_hold_no_code():
    code = [str(p.relative_to(REPO)) for p in RESULTS.rglob("*")
            if p.is_file() and p.suffix in CODE_SUFFIXES]
    assert code == []


def test_the_index_exists_and_links_each_study():
    assert INDEX.is_file()
    studies = {_target(INDEX, t) for t in _links(INDEX)}
    # every folder directly under results/<machine>/ is a study that the index links
    folders = {d.resolve() / "README.md" for machine in RESULTS.iterdir() if machine.is_dir()
               for d in machine.iterdir() if d.is_dir()}
    assert folders and sorted(map(str, folders - studies)) == []


@pytest.mark.parametrize("readme", _readmes(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_relative_link_resolves(readme):
    broken = [t for t in _links(readme) if not _target(readme, t).exists()]
    assert broken == []


def test_every_readme_is_reached_from_the_index():
    seen, todo = set(), [INDEX.resolve()]
    while todo:
        readme = todo.pop()
        if readme in seen:
            continue
        seen.add(readme)
        for t in _links(readme):
            p = _target(readme, t)
            if p.name == "README.md" and p.is_file() and RESULTS.resolve() in p.parents:
                todo.append(p)
    assert sorted(str(p.relative_to(RESULTS)) for p in _readmes() if p.resolve() not in seen) == []


def test_each_study_readme_states_its_question():
    studies = {_target(INDEX, t) for t in _links(INDEX) if t.endswith("/README.md")}
    assert studies
    missing = [str(p.relative_to(RESULTS)) for p in sorted(studies)
               if "**Question.**" not in p.read_text(encoding="utf-8")]
    assert missing == []


@pytest.mark.parametrize("line,reads", [
    ('POINTS = REPO / "results" / "h200" / "engines" / "points.csv"', True),
    ("net = os.path.join(root, 'results', 'cpu', 'net.prototxt')", True),
    ('doc = json.loads(Path("results/h200/reproduce.json").read_text())', True),
    ('out = tmp_path / f"results/{net}.csv"', True),
    ('"""Replays the profile of results/h200/cold_planning/ (a comment, not a path)."""', False),
    ("assert results.pending(grid.grid(['alexnet'], [8], shared=False), doc)", False),
    ('PATH = REPO / "tests" / "data" / "h200_reproduce" / "reproduce.json"', False),
    ('assert all(re.match(r"results/[^/]+/", t) for t in links)', False),
    ('assert re.match(r"results/x", t) and Path("results/y").is_file()', True),
])
def test_the_check_for_results_paths_tells_reads_from_mentions(line, reads):
    assert reads_results(line) == reads


def test_no_test_reads_from_results():
    here = Path(__file__).resolve()
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
             for p in sorted(TESTS.rglob("*.py")) if p.resolve() != here
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if reads_results(line)]
    assert found == []


def test_studies_name_notes_where_they_are():
    """A study's `Note [title] in `path`` names the file that holds the Note now."""
    wrong, checked = wrong_note_refs(sorted(RESULTS.rglob("*.md")), notes_written())
    assert not wrong, wrong
    assert checked >= 20
