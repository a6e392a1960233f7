"""The package's shape, read from its source with ``ast`` (the package is never imported):
the import graph of ``ucudnn/`` has no cycle, every import runs downward through the layers
(Note [Layers of the package] in ucudnn/__init__.py), imports of the package's own modules sit
at the top of each module (the compiled core aside, imported lazily through its one door),
each folder's docstring names its modules and what the folder imports, and files and classes
stay readable in size.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from repo_paths import REPO

PACKAGE = REPO / "ucudnn"
#: (layer, the module prefixes in it), lowest first (Note [Layers of the package] in
#: ucudnn/__init__.py)
LAYERS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("base", ("ucudnn", "ucudnn.vocab", "ucudnn.paths", "ucudnn.config", "ucudnn.files")),
    ("plan", ("ucudnn.plan",)),
    ("measure", ("ucudnn.measure",)),
    ("caffe", ("ucudnn.caffe",)),
    ("experiments", ("ucudnn.experiments",)),
    ("cli", ("ucudnn.cli",)),
    ("main", ("ucudnn.__main__",)),
    ("torch", ("ucudnn.torch",)),
)
#: the compiled core, and the one function that imports it
CORE = "ucudnn._core"
CORE_DOOR = ("ucudnn.measure.bench", "_load_core")
#: the optional C++ extension of ucudnn.torch (Note [Native calls] in ucudnn/torch/eager.py),
#: and the one function that imports it
NATIVE = "ucudnn.torch._native"
NATIVE_DOOR = ("ucudnn.torch.eager", "_load_native")
#: compiled modules: no source file here
COMPILED = {"ucudnn._core", "ucudnn._capi", "ucudnn._capi_api", NATIVE}
MAX_FILE_LINES = 800
MAX_CLASS_LINES = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> Dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _sources()


def _is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


class Import:
    """One import of a package module: ``source`` imports ``target`` at ``line``, inside the
    function ``function`` (None: at import time)."""

    def __init__(self, source: str, target: str, line: int, function: Optional[str]):
        self.source, self.target, self.line, self.function = source, target, line, function

    def __repr__(self) -> str:
        where = f" in {self.function}()" if self.function else ""
        return f"{MODULES[self.source].relative_to(REPO)}:{self.line}{where}: {self.target}"


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    # a module's relative import starts from its package; a package's from itself
    base = base if _is_package(module) else base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, node: ast.AST) -> List[str]:
    """The package modules ``node`` imports (``from . import x``: the submodule x where
    there is one, else the package)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = _resolve(module, node)
        names = []
        for a in node.names:
            sub = f"{base}.{a.name}"
            names.append(sub if sub in MODULES or sub in COMPILED else base)
    return [n for n in dict.fromkeys(names) if n == "ucudnn" or n.startswith("ucudnn.")]


def _imports(module: str) -> List[Import]:
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    out: List[Import] = []

    def visit(node: ast.AST, function: Optional[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.extend(Import(module, t, child.lineno, function)
                           for t in _targets(module, child))
            inner = (child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                     else "<lambda>" if isinstance(child, ast.Lambda) else None)
            visit(child, function or inner)
    visit(tree, None)
    return out


IMPORTS: List[Import] = [i for m in MODULES for i in _imports(m)]


def _layer(module: str) -> int:
    best = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if module == p or (p != "ucudnn" and module.startswith(p + ".")):
                best = rank
    assert best is not None, f"{module}: in no layer of LAYERS"
    return best


def _cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (or a module importing
    itself), each as one cycle through them."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    comps: List[List[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                comps.append(comp)

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return [_one_cycle(sorted(c), edges) for c in comps]


def _one_cycle(comp: List[str], edges: Dict[str, Set[str]]) -> List[str]:
    """A cycle from ``comp[0]`` back to it inside the component (breadth first)."""
    members, start = set(comp), comp[0]
    prev: Dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, ())):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if v != start else [start, start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def _graph() -> Dict[str, Set[str]]:
    edges: Dict[str, Set[str]] = {m: set() for m in MODULES}
    for i in IMPORTS:
        if i.target in MODULES and i.target != i.source:
            edges[i.source].add(i.target)
    return edges


# ---------------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------------

def test_the_graph_is_read():
    # the reader finds the imports it is meant to judge: relative, absolute, in functions,
    # ``from . import x`` as the submodule
    edges = _graph()
    assert len(MODULES) > 50 and len(IMPORTS) > 200
    assert "ucudnn.vocab" in edges["ucudnn.plan.dp"]
    assert "ucudnn.cli.bench" in edges["ucudnn.cli"]                # from . import bench
    assert any(i.target == CORE and i.function == CORE_DOOR[1] for i in IMPORTS)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"a"}}) == [["a", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_imports_run_down_the_layers():
    upward = [f"{i!r} ({LAYERS[_layer(i.source)][0]} imports {LAYERS[_layer(i.target)][0]})"
              for i in IMPORTS if i.target in MODULES
              and _layer(i.target) > _layer(i.source)]
    assert not upward, "imports of a higher layer (Note [Layers of the package]):\n" + \
        "\n".join(upward)


def test_own_imports_at_the_top_except_the_compiled_ones():
    doors = {CORE: CORE_DOOR, NATIVE: NATIVE_DOOR}
    inside = [repr(i) for i in IMPORTS if i.function is not None
              and doors.get(i.target) != (i.source, i.function)]
    assert not inside, "imports of the package inside functions (only ucudnn._core, in " \
        f"{'.'.join(CORE_DOOR)}(), and {NATIVE}, in {'.'.join(NATIVE_DOOR)}()):\n" + \
        "\n".join(inside)
    assert [(i.source, i.function) for i in IMPORTS if i.target == NATIVE] == [NATIVE_DOOR]


def _imports_by_name(module: str) -> List[str]:
    """Where ``module`` imports a module by a name in a string (``importlib.import_module``,
    ``__import__``) that names the compiled core."""
    out = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("import_module", "__import__") and "_core" in str(node.args[0].value):
                out.append(f"{MODULES[module].relative_to(REPO)}:{node.lineno}")
    return out


def test_the_core_has_one_door():
    doors = [i for i in IMPORTS if i.target == CORE]
    assert [(i.source, i.function) for i in doors] == [CORE_DOOR], doors
    by_name = [where for m in MODULES for where in _imports_by_name(m)]
    assert not by_name, "the compiled core imported by name, not through its door: " + \
        ", ".join(by_name)


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_folder_docstrings_name_their_modules():
    missing = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        doc = _docstring(init)
        folder = init.parent
        names = sorted([p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
                       + [p.name for p in folder.iterdir()
                          if (p / "__init__.py").is_file()])
        for name in names:
            if not re.search(rf"`(?:[\w.]*\.)?{re.escape(name)}(?:\.py)?`", doc):
                missing.append(f"{init.relative_to(REPO)}: {name}")
        if init.parent != PACKAGE and not re.search(
                r"(?s)Imports\s.*never\s.*Note\s+\[Layers\s+of\s+the\s+package\]", doc):
            missing.append(f"{init.relative_to(REPO)}: does not say what the folder imports "
                           "and never imports, after Note [Layers of the package]")
    assert not missing, "folder docstrings lacking a module:\n" + "\n".join(missing)


def test_files_and_classes_stay_readable():
    big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n") + (not text.endswith("\n"))
        if lines > MAX_FILE_LINES:
            big.append(f"{path.relative_to(REPO)}: {lines} lines (at most {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_CLASS_LINES:
                    big.append(f"{path.relative_to(REPO)}:{node.lineno}: class {node.name}: "
                               f"{n} lines (at most {MAX_CLASS_LINES})")
    assert not big, "\n".join(big)
