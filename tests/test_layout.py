"""The project's shape that users and tools rely on: one floor per folder (docs/architecture.md)."""

from __future__ import annotations

import ast
import fnmatch
import sys
import tomllib

from tests.conftest import REPO
from tests.imports import find_cycle, imports_of, missing_names, project_modules

# Bottom to top. A folder imports only folders on lower floors; folders on one floor are
# independent of each other. Code under `if __name__ == "__main__":` is a script's entry (what
# `spark-submit pipelines/ingest.py` runs), not part of its module: it belongs to the top floor.
FLOORS = [
    ["lakehouse"],
    ["quality", "mixtures"],
    ["pipelines", "streaming_loader"],
    ["trainer"],
    ["evals", "experiments"],
    ["rl"],
    ["ui"],
    ["orchestration"],
    ["factory_cli"],
]
FLOOR_OF = {package: level for level, packages in enumerate(FLOORS) for package in packages}

# The ground floor talks to the catalog and reads files, nothing else: no Spark, Ray or torch.
# (sqlalchemy is the engine of pyiceberg's SQL catalog, whose "database is locked" error the
# commit protocol retries.)
LAKEHOUSE_THIRD_PARTY = {"pyiceberg", "pyarrow", "sqlalchemy"}


def _all_imports():
    modules = project_modules(REPO, list(FLOOR_OF))
    return [imp for path in modules.values() for imp in imports_of(REPO, path, modules)]


def test_every_project_package_has_a_floor():
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")} - {"tests", "benchmarks"}
    assert packages == set(FLOOR_OF), "give each new package a floor in FLOORS"


def test_every_project_package_is_installed_with_the_factory_command():
    # The `factory` script runs from .venv/bin, not the checkout: a package left out of the
    # distribution imports in the tests (run from the repository) and fails for a user.
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    missing = [p for p in FLOOR_OF if not any(fnmatch.fnmatchcase(p, pattern) for pattern in patterns)]
    assert not missing, f"add {missing} to [tool.setuptools.packages.find] include in pyproject.toml"


def test_imports_point_down_the_floors():
    wrong = []
    for imp in _all_imports():
        if imp.in_main_block:  # a script's entry sits on the top floor: it may import any floor
            continue
        importer, imported = imp.importer.split(".")[0], imp.imported.split(".")[0]
        if importer != imported and FLOOR_OF[imported] >= FLOOR_OF[importer]:
            wrong.append(str(imp))
    assert not wrong, "imports that do not point to a lower floor:\n" + "\n".join(wrong)


def test_no_import_cycle_between_files():
    edges: dict[str, set[str]] = {}
    for imp in _all_imports():
        if not imp.in_main_block:
            edges.setdefault(imp.importer, set()).add(imp.imported)
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_name_imported_from_the_project_exists():
    # Modules import each other inside functions too (to start quickly): a moved or renamed
    # name would otherwise fail only when that code path runs.
    modules = project_modules(REPO, [*FLOOR_OF, "tests", "benchmarks"])
    missing = missing_names(REPO, modules)
    assert not missing, "imports of names that do not exist:\n" + "\n".join(missing)


def test_the_ground_floor_imports_only_pyiceberg_pyarrow_and_the_standard_library():
    wrong = []
    for path in sorted((REPO / "lakehouse").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in LAKEHOUSE_THIRD_PARTY | {"lakehouse"}:
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert not wrong, "the lakehouse package must not import:\n" + "\n".join(wrong)


def test_the_checker_finds_an_upward_import_inside_a_function(tmp_path):
    for package in ("low", "high"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "high" / "job.py").write_text("X = 1\n")
    (tmp_path / "low" / "step.py").write_text("def f():\n    from high.job import X\n    return X\n")
    modules = project_modules(tmp_path, ["low", "high"])
    found = imports_of(tmp_path, tmp_path / "low" / "step.py", modules)
    assert [(i.importer, i.imported, i.line, i.in_main_block) for i in found] == [("low.step", "high.job", 2, False)]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_no_job_module_shadows_the_standard_library():
    # `spark-submit pipelines/<job>.py` puts pipelines/ first on sys.path, so a module named
    # like a standard one (inspect, gc, types…) would replace it for the whole job.
    names = {p.stem for p in (REPO / "pipelines").glob("*.py")}
    assert not names & set(sys.stdlib_module_names)


def test_no_reference_to_a_document_outside_the_repository():
    folders = [REPO / name for name in (*FLOOR_OF, "tests", "benchmarks", "docs", "configs", "infra")]
    texts = [REPO / "README.md", REPO / "pyproject.toml"]
    texts += [p for folder in folders for p in folder.rglob("*") if p.suffix in {".py", ".md", ".toml"}]
    wrong = [
        str(p.relative_to(REPO))
        for p in texts
        if p.name != "test_layout.py" and (any(name in p.read_text() for name in ("DESIGN.md", "NOTES.md", "shared/")))
    ]
    assert not wrong, "these cite a document that is not in this repository: " + ", ".join(wrong)


def test_every_dependency_is_pinned():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {
        line.split("==")[0].lower().replace("_", "-")
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    names = {d.split("[")[0].split("<")[0].split("=")[0].strip().lower().replace("_", "-") for d in wanted}
    assert names <= pins, names - pins
