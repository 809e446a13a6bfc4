"""No import circle inside ``migrator/`` and ``codemods/``.

Every module's imports are read with :mod:`ast`: module-level and function-level ``import x`` and
``from x import y`` (relative imports resolved), so that a circle cannot hide behind an import
moved into a function. ``from pkg import name`` is an edge to ``pkg.name`` when that is a module,
else to ``pkg``. Imports under ``if TYPE_CHECKING:`` are left out (they never run). Only edges
between modules of the two packages count. A failure names the circle, module by module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("migrator", "codemods")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Import nodes, skipping the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            # `import a.b.c` binds through a.b.c itself: keep the longest known prefix
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(edges, WHITE)
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        color[node] = GREY
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if color.get(nxt, BLACK) == GREY:
                return path[path.index(nxt):] + [nxt]
            if color.get(nxt) == WHITE:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        color[node] = BLACK
        return None

    for start in sorted(edges):
        if color[start] == WHITE:
            found = visit(start)
            if found:
                return found
    return None


def test_the_graph_is_read():
    edges = graph()
    assert "migrator.rules" in edges["migrator.python_engine"]
    assert "codemods.project.shell_plans" in edges["codemods.project.dockerfile"]
    assert "codemods.training.sources" in edges["codemods.training.parallel"]


def test_no_import_circle():
    cycle = find_cycle(graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_a_circle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_function_level_imports_count(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    from pkg import other\n")
    (tmp_path / "t.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.other\n")
    known = {"pkg.m": tmp_path / "m.py", "pkg.other": tmp_path / "m.py", "pkg.t": tmp_path / "t.py"}
    assert imported("pkg.m", tmp_path / "m.py", known) == {"pkg.other"}
    assert imported("pkg.t", tmp_path / "t.py", known) == set()


def test_every_module_imports_first_in_a_fresh_interpreter():
    """An import circle through the packages' ``__init__`` modules shows only in the order modules are first
    imported (``import codemods.upgrade.base`` before anything else): each module is imported first, with every
    module of the two packages dropped from ``sys.modules`` before it, in one subprocess."""
    import subprocess
    import sys

    names = sorted(n for n in modules() if not n.endswith("__main__"))
    code = (
        "import importlib, sys\n"
        f"names = {names!r}\n"
        "bad = []\n"
        "for name in names:\n"
        "    for k in [k for k in sys.modules if k.split('.')[0] in ('codemods', 'migrator')]:\n"
        "        del sys.modules[k]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        bad.append(f'{name}: {e!r}')\n"
        "print('\\n'.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", proc.stdout
