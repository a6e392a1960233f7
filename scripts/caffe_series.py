#!/usr/bin/env python3
"""The Caffe patch series (caffe_patch/) as a git branch, and back.

  caffe_series.py apply     pristine Caffe -> a git repository (default
                            third_party/caffe/series): the pristine tree is the first
                            commit, then one commit per patch of caffe_patch/, with the
                            patch's subject and body as its message
  caffe_series.py export    `git format-patch` of that branch into caffe_patch/:
                            fixed author and date, --zero-commit, --no-signature,
                            numbered by position, so that exporting an unchanged branch
                            gives the same bytes
  caffe_series.py check     lines a patch removes that an earlier patch of the series
                            added (the series rewrites itself); exit 1 when there are any
  caffe_series.py manifest  sha256 of every file the series touches, in the final tree

Editing the series: `apply`, then edit the branch with git (commit --amend, rebase -i,
...), then `export`; a commit's patch file keeps its name (a git note of the ref
patch-name holds it; new commits are named by their subject). The pristine tree is the one
scripts/build_caffe.sh fetches and verifies (`--fetch-only`), unless --pristine is given.

Only the standard library and git.
"""

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PATCH_DIR = REPO / "caffe_patch"
DEFAULT_WORK = REPO / "third_party" / "caffe"
PATCH_GLOB = "[0-9][0-9][0-9][0-9]-*.patch"

#: Every commit and every exported patch has this author and date: the patches' bytes
#: depend on their content only.
AUTHOR = ("ucudnn", "ucudnn@localhost")
DATE = "Sun, 29 Nov 2026 00:00:00 +0000"
NOTES_REF = "refs/notes/patch-name"
BASE_SUBJECT = "BVLC Caffe 99bd997 (pristine)"
#: Written by scripts/build_caffe.sh into the pristine tree: not Caffe's.
STAMP = ".ucudnn-source"


def _env():
    """git without the user's or the system's configuration, as AUTHOR at DATE."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_NAME=AUTHOR[0], GIT_AUTHOR_EMAIL=AUTHOR[1], GIT_AUTHOR_DATE=DATE,
               GIT_COMMITTER_NAME=AUTHOR[0], GIT_COMMITTER_EMAIL=AUTHOR[1],
               GIT_COMMITTER_DATE=DATE, LC_ALL="C")
    return env


def git(repo, *args, input=None, check=True):
    res = subprocess.run(["git", "-C", str(repo), "-c", "core.autocrlf=false",
                          "-c", "core.abbrev=12", *args],
                         input=input, capture_output=True, text=True, env=_env())
    if check and res.returncode != 0:
        sys.exit(f"caffe_series: git {' '.join(args)} failed:\n{res.stderr}{res.stdout}")
    return res.stdout


def patches(patch_dir):
    return sorted(Path(patch_dir).glob(PATCH_GLOB))


def slug(patch_name):
    """0004-cudnn-batch-norm.patch -> cudnn-batch-norm"""
    return re.sub(r"^\d{4}-|\.patch$", "", patch_name)


def series_commits(repo):
    """(base, [commits of the patches, oldest first]) of the branch checked out in repo."""
    if not (Path(repo) / ".git").is_dir():
        sys.exit(f"caffe_series: no repository at {repo} (caffe_series.py apply makes it)")
    roots = git(repo, "rev-list", "--max-parents=0", "HEAD").split()
    if len(roots) != 1:
        sys.exit(f"caffe_series: {repo}: expected one root commit (the pristine tree)")
    commits = git(repo, "rev-list", "--reverse", "--first-parent", f"{roots[0]}..HEAD").split()
    return roots[0], commits


def pristine_tree(args):
    if args.pristine:
        tree = Path(args.pristine)
    else:
        tree = Path(args.work) / "pristine"
        if not (tree / STAMP).is_file():
            res = subprocess.run(["bash", str(REPO / "scripts" / "build_caffe.sh"),
                                  "--prefix", str(args.work), "--fetch-only"])
            if res.returncode != 0:
                sys.exit("caffe_series: could not obtain the pristine Caffe tree "
                         "(scripts/build_caffe.sh --fetch-only; or give --pristine DIR)")
    if not (tree / "CMakeLists.txt").is_file():
        sys.exit(f"caffe_series: {tree} is not a Caffe source tree")
    return tree


def cmd_apply(args):
    repo = Path(args.repo)
    if repo.exists():
        if not args.force:
            sys.exit(f"caffe_series: {repo} exists (export it first if it holds work); "
                     "--force replaces it")
        shutil.rmtree(repo)
    tree = pristine_tree(args)
    shutil.copytree(tree, repo, symlinks=True, ignore=shutil.ignore_patterns(".git", STAMP))
    git(repo, "init", "-q", "-b", "series")
    git(repo, "config", "notes.rewriteRef", NOTES_REF)
    # Caffe's own .gitignore would leave files of the tarball out
    git(repo, "add", "-A", "-f")
    git(repo, "commit", "-q", "--no-verify", "-m", BASE_SUBJECT)
    with tempfile.TemporaryDirectory() as tmp:
        for p in patches(args.patches):
            msg, diff = Path(tmp) / "msg", Path(tmp) / "diff"
            info = git(repo, "mailinfo", str(msg), str(diff), input=p.read_text())
            subject = re.search(r"^Subject: (.*)$", info, re.M).group(1)
            body = msg.read_text().strip()
            res = subprocess.run(["git", "-C", str(repo), "apply", "--index",
                                  "--whitespace=nowarn", str(diff)],
                                 capture_output=True, text=True, env=_env())
            if res.returncode != 0:
                sys.exit(f"caffe_series: {p.name} does not apply:\n{res.stderr}")
            git(repo, "commit", "-q", "--no-verify", "--allow-empty", "-F", "-",
                input=subject + ("\n\n" + body if body else "") + "\n")
            git(repo, "notes", "--ref", NOTES_REF, "add", "-f", "-m", slug(p.name), "HEAD")
            print(f"applied {p.name}")
    print(f"{repo}: branch series, {len(patches(args.patches))} commits on the pristine tree")


def _fix_header(text):
    """format-patch's header with the fixed author and date (commits made by git rebase
    or by hand carry other ones)."""
    head, sep, rest = text.partition("\n\n")
    head = re.sub(r"^From: .*$", f"From: {AUTHOR[0]} <{AUTHOR[1]}>", head, count=1, flags=re.M)
    head = re.sub(r"^Date: .*$", f"Date: {DATE}", head, count=1, flags=re.M)
    return head + sep + rest


def export_text(repo):
    """{file name: text} of the branch's patches, as `export` writes them."""
    base, commits = series_commits(repo)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, c in enumerate(commits, 1):
            name = git(repo, "notes", "--ref", NOTES_REF, "show", c, check=False).strip()
            if not name:
                subject = git(repo, "log", "-1", "--format=%s", c)
                name = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:52].strip("-")
            files = git(repo, "format-patch", "--zero-commit", "--no-signature",
                        "--no-numbered", "--no-renames", "--no-binary", "--diff-algorithm=myers",
                        "--stat=80", "--no-notes", "--encoding=UTF-8", "-o", tmp, "-1", c).split()
            (path,) = files
            out[f"{i:04d}-{name}.patch"] = _fix_header(Path(path).read_text())
            os.remove(path)
    return out


def cmd_export(args):
    out_dir = Path(args.patches)
    texts = export_text(args.repo)
    for p in patches(out_dir):
        if p.name not in texts:
            p.unlink()
    for name, text in texts.items():
        path = out_dir / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path}")
    print(f"{out_dir}: {len(texts)} patches")


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", re.M)


def rewrites(repo):
    """{(adding patch, removing patch): [(path, line)]}: the lines each commit removes that
    an earlier commit of the series (not the pristine tree) added, by `git blame` of the
    commit's parent."""
    base, commits = series_commits(repo)
    index = {c: i for i, c in enumerate(commits, 1)}
    counts = {}
    for c in commits:
        diff = git(repo, "diff", "--no-renames", "--no-ext-diff", "--diff-algorithm=myers",
                   "-U0", f"{c}^", c)
        for chunk in re.split(r"^diff --git ", diff, flags=re.M)[1:]:
            old = re.search(r"^--- (?:a/(.+)|/dev/null)$", chunk, re.M)
            if not old or old.group(1) is None:
                continue                       # a new file removes nothing
            removed = []
            for m in _HUNK.finditer(chunk):
                start, n = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
                # -U0: the hunk's n removed lines follow its header
                texts = [l[1:] for l in chunk[m.end():].split("\n")[1:] if l[:1] == "-"][:n]
                removed.extend(zip(range(start, start + n), texts))
            if not removed:
                continue
            blame = git(repo, "blame", "--porcelain", f"{c}^", "--", old.group(1))
            owner = {}
            for m in re.finditer(r"^([0-9a-f]{40}) \d+ (\d+)(?: (\d+))?$", blame, re.M):
                owner[int(m.group(2))] = m.group(1)
            for line, text in removed:
                adder = index.get(owner[line])
                if adder is not None:
                    counts.setdefault((adder, index[c]), []).append((old.group(1), text))
    return counts


def cmd_check(args):
    base, commits = series_commits(args.repo)
    names = [git(args.repo, "notes", "--ref", NOTES_REF, "show", c, check=False).strip()
             or c[:12] for c in commits]
    counts = rewrites(args.repo)
    for (a, r), lines in sorted(counts.items()):
        print(f"{r:04d} {names[r - 1]} removes {len(lines)} line(s) of {a:04d} {names[a - 1]}")
        if args.lines:
            for path, text in lines:
                print(f"    {path}: {text}")
    total = sum(map(len, counts.values()))
    print(f"{total} line(s) of the series removed by a later patch of it")
    return 1 if total else 0


def touched(repo):
    """The files the series creates or changes."""
    base, commits = series_commits(repo)
    if not commits:
        return []
    return sorted(git(repo, "diff", "--no-renames", "--name-only", base, "HEAD").split())


def manifest(repo):
    """'sha256  path' lines of the files the series touches, in the branch's final tree."""
    lines = []
    for path in touched(repo):
        data = (Path(repo) / path).read_bytes()
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {path}\n")
    return "".join(lines)


def cmd_manifest(args):
    sys.stdout.write(manifest(args.repo))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default=str(DEFAULT_WORK),
                    help="build_caffe.sh's work root, whose pristine/ is used "
                         "(default: third_party/caffe)")
    ap.add_argument("--pristine", help="the pristine Caffe tree (default: WORK/pristine, "
                                       "fetched by scripts/build_caffe.sh --fetch-only)")
    ap.add_argument("--repo", help="the series' git repository (default: WORK/series)")
    ap.add_argument("--patches", default=str(PATCH_DIR), help="default: caffe_patch/")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("apply", help="pristine tree + caffe_patch/ -> the git branch")
    p.add_argument("--force", action="store_true", help="replace an existing repository")
    sub.add_parser("export", help="the git branch -> caffe_patch/")
    p = sub.add_parser("check", help="count lines of the series that a later patch removes")
    p.add_argument("--lines", action="store_true", help="print each of those lines")
    sub.add_parser("manifest", help="sha256 of the files the series touches")
    args = ap.parse_args(argv)
    args.work = str(Path(args.work).resolve())
    if args.repo is None:
        args.repo = str(Path(args.work) / "series")
    return {"apply": cmd_apply, "export": cmd_export, "check": cmd_check,
            "manifest": cmd_manifest}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
