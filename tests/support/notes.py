"""Where the `Note [title]` blocks are written, and the pages that name them.

A Note's heading is a line holding only `Note [title]` (after comment marks) in the
repository's code, or in a file of Caffe's tree as the patch series writes it. A page names a
Note as `Note [title]`, and says where it is as `Note [title] in `path``.
"""
import re

from repo_paths import REPO

CODE_DIRS = ("ucudnn", "cython", "scripts", "tests", "setup.py")
CODE_SUFFIXES = {".py", ".pyx", ".pxd", ".h", ".c", ".cpp", ".cu", ".sh", ".proto"}
NOTE = r"Note \[([^\]]+)\]"


def code_files():
    for name in CODE_DIRS:
        root = REPO / name
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        yield from (f for f in files if f.suffix in CODE_SUFFIXES and f.is_file())


#: a Note's own heading: a line that holds only `Note [title]` (after comment marks)
HEADING = re.compile(r"^[ \t]*(?:#|//|/?\*+)?[ \t]*Note \[([^\]]+)\][ \t]*:?$", re.M)


def caffe_sections():
    """{path in Caffe's tree: the lines the patch series adds to it, joined}."""
    sections = {}
    for patch in sorted((REPO / "caffe_patch").glob("*.patch")):
        for part in re.split(r"^diff --git ", patch.read_text(), flags=re.M)[1:]:
            m = re.search(r"^\+\+\+ b/(\S+)", part, re.M)
            if m:
                added = "\n".join(l[1:] for l in part.splitlines() if l.startswith("+")
                                  and not l.startswith("+++"))
                sections[m.group(1)] = sections.get(m.group(1), "") + "\n" + added
    return sections


def notes_written():
    """{title: the files that hold its heading}: the repository's code, and Caffe's files as
    the patch series writes them."""
    texts = {str(f.relative_to(REPO)): f.read_text(errors="replace") for f in code_files()}
    texts.update(caffe_sections())
    written = {}
    for path, text in texts.items():
        for title in HEADING.findall(text):
            written.setdefault(title, set()).add(path)
    return written


def note_refs(text):
    """(titles, path) of every `Note [a] (, Note [b] and Note [c]) in `path`` of a text."""
    text = re.sub(r"\s+", " ", text)
    for notes, path in re.findall(rf"((?:Note \[[^\]]+\](?:,| and)? )+)in `([^`]+)`", text):
        yield re.findall(NOTE, notes), path


def wrong_note_refs(pages, written):
    """([(page, title, ...why)], how many `in path` references were checked) of ``pages``:
    a Note named that no code writes, or one said to be in a file that does not hold it."""
    wrong, checked = [], 0
    for page in pages:
        text = page.read_text()
        rel = page.relative_to(REPO).as_posix()
        prose = re.sub(r"`Note \[[^`]*`", "", re.sub(r"\s+", " ", text))  # `Note [title]`
        wrong += [(rel, title, "no such Note") for title in set(re.findall(NOTE, prose))
                  if title not in written]
        for titles, path in note_refs(text):
            checked += len(titles)
            wrong += [(rel, title, path, f"written in {sorted(written.get(title, ()))}")
                      for title in titles if path not in written.get(title, ())]
    return wrong, checked
