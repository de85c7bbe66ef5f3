"""The project's own imports, read from the source with ``ast`` (imports inside functions and
under ``TYPE_CHECKING`` included), as a graph of modules: what ``tests/test_layout.py`` checks."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    """One import statement of one project module."""

    importer: str  # dotted module name, e.g. "pipelines.dedup"
    imported: str  # the project module it loads, e.g. "lakehouse.commit"
    path: Path
    line: int
    in_main_block: bool  # under `if __name__ == "__main__":`: code run as a script, not as the module

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported}"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, packages: list[str]) -> dict[str, Path]:
    """Every module of the named top-level packages: dotted name → file."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            modules[module_name(root, path)] = path
    return modules


def imports_of(root: Path, path: Path, modules: dict[str, Path]) -> list[Import]:
    """The project modules ``path`` imports, each resolved to the module file it loads."""
    importer = module_name(root, path)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    main_lines = _main_block_lines(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(importer, is_package, node.module, node.level)
            # `from pkg import name` loads pkg.name when that is a module, else pkg itself.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved and resolved != importer:
                found.append(Import(importer, resolved, path, node.lineno, node.lineno in main_lines))
    return found


def _absolute(importer: str, is_package: bool, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = importer.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest project module that ``name`` is or lies inside (``a.b.c`` → ``a.b``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _main_block_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_test(node.test):
            for child in ast.walk(node):
                if hasattr(child, "lineno"):
                    lines.add(child.lineno)
    return lines


def _is_main_test(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of nodes (first == last), or None when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def missing_names(root: Path, modules: dict[str, Path]) -> list[str]:
    """``from project.module import name`` statements whose module defines no ``name``."""
    defined = {name: _defined_names(path) for name, path in modules.items()}
    missing = []
    for importer, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _absolute(importer, is_package, node.module, node.level)
            if base not in modules or defined[base] is None:
                continue
            for alias in node.names:
                if alias.name != "*" and f"{base}.{alias.name}" not in modules and alias.name not in defined[base]:
                    missing.append(f"{path.relative_to(root)}:{node.lineno}: {base} has no {alias.name}")
    return missing


def _defined_names(path: Path) -> set[str] | None:
    """The names a module binds at its top level; None when a module ``__getattr__`` makes any name."""
    names: set[str] = set()
    pending = list(ast.parse(path.read_text(), filename=str(path)).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
            pending.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.ExceptHandler):
            pending.extend(node.body)
    return None if "__getattr__" in names else names
