"""The repositories an environment is built from: source trees on this machine whose tests run.

- ``stdlib``: the interpreter's standard library with its own ``test/`` suite (CPython runs it
  with unittest: each ``test/test_*`` module is loaded by name);
- every package of the interpreter's site-packages that ships tests (files ``test_*.py`` or
  ``*_test.py`` in a ``test``/``tests`` folder), run with pytest when it uses pytest (imports it,
  or has a ``conftest.py``), else with unittest;
- any package folder given by path (its parent is the import root).

A repository's test modules are chosen by a hash of their names (``max_test_modules``), so a
smaller build is a sample of the larger one, the same on every machine with the same trees.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lakehouse.errors import InputError
from rl.sandbox import Checkout

STDLIB = "stdlib"
STDLIB_SUITE_MODULES = 10  # fewer test modules than this under the stdlib's test/: its suite is not installed
TEST_FOLDERS = {"test", "tests"}
_SKIPPED_FOLDERS = {"__pycache__", "site-packages", "dist-packages"}
_NAME = re.compile(r"[^a-z0-9_\-]")


@dataclass(frozen=True)
class Repository:
    name: str
    checkout: Checkout
    test_modules: tuple[str, ...]  # pytest: file paths from the import root; unittest: module names
    exclude: tuple[str, ...] = ()  # globs (from repo_root) of folders that are not the repository's
    subjects_by_name: bool = False  # a test module ``test.test_X`` tests module X only (the stdlib's convention)

    @property
    def files_base(self) -> str:
        """Where a file's ``path`` starts from: the repository folder's parent, as the ingest job
        names files (``python3.11/textwrap.py``, ``pandas/core/frame.py``)."""
        return os.path.dirname(self.checkout.repo_root.rstrip("/"))

    def relpath(self, filename: str) -> str | None:
        """``filename``'s path as a task names it, or None when it is not the repository's source
        (outside it, excluded, a test file)."""
        root = self.checkout.repo_root.rstrip("/") + "/"
        if not filename.startswith(root) or not filename.endswith(".py"):
            return None
        inner = filename[len(root) :]
        if any(fnmatch.fnmatchcase(inner, pattern) for pattern in self.exclude) or is_test_file(inner):
            return None
        return os.path.relpath(filename, self.files_base)

    def tests_path(self, test_module: str, path: str) -> bool:
        """Whether the file ``path`` (as a task names it) is what ``test_module`` tests. CPython names
        it: ``test.test_json`` tests the ``json`` package and ``test.test_colorsys`` the ``colorsys``
        module; what they reach through ``test.support`` (``threading``, ``warnings``) they only use.
        A package's tests may test any of its source."""
        if not self.subjects_by_name:
            return True
        subject = test_module.split(".")[1].removeprefix("test_")
        inner = path.split("/", 1)[-1]
        return inner == f"{subject}.py" or inner.startswith(f"{subject}/")


def is_test_file(inner: str) -> bool:
    parts = inner.split("/")
    name = parts[-1]
    return (
        name == "conftest.py"
        or name.startswith("test_")
        or name.endswith("_test.py")
        or bool(TEST_FOLDERS.intersection(parts[:-1]))
    )


def find_repositories(
    python: str,
    names: Sequence[str] = (),
    paths: Sequence[str] = (),
    include_tests: Sequence[str] = (),
    max_test_modules: int = 20,
) -> list[Repository]:
    """The repositories to build from, sorted by name: those of ``python`` named in ``names`` (all
    when neither ``names`` nor ``paths`` is given) and the package folders in ``paths``."""
    found: dict[str, Repository] = {}
    if names or not paths:
        layout = _layout(python)
        found.update((r.name, r) for r in _installed(python, layout, set(names)))
        unknown = sorted(set(names) - set(found))
        if unknown:
            known = sorted(r.name for r in _installed(python, layout, set()))  # only the named were looked at
            raise InputError(
                f"no repository named {', '.join(unknown)} under {python}: choose among {', '.join(known)}"
            )
        if names:
            found = {name: found[name] for name in names}
    for path in paths:
        repo = _package(python, Path(path).resolve())
        if repo is None:
            raise InputError(f"{path} is not a package folder with tests (test_*.py in a test/ or tests/ folder)")
        found[repo.name] = repo
    chosen = []
    for repo in sorted(found.values(), key=lambda r: r.name):
        modules = [m for m in repo.test_modules if _included(m, include_tests)]
        modules = sorted(modules, key=lambda m: hashlib.sha256(m.encode()).hexdigest())[:max_test_modules]
        if modules:
            chosen.append(replace(repo, test_modules=tuple(sorted(modules))))
    if not chosen:
        raise InputError("no test modules left to build from: check --repository, --path and --tests")
    return chosen


def _included(module: str, patterns: Sequence[str]) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(module, p) for p in patterns)


def _layout(python: str) -> dict[str, str]:
    """Where ``python`` keeps its standard library and packages (asked of it: it may be another)."""
    code = (
        "import json, sys, sysconfig; print(json.dumps({'stdlib': sysconfig.get_path('stdlib'), "
        "'purelib': sysconfig.get_path('purelib'), 'platlib': sysconfig.get_path('platlib'), "
        "'base': getattr(sys, '_base_executable', sys.executable)}))"
    )
    try:
        done = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise InputError(f"cannot ask {python} where its libraries are: {exc}") from exc
    return json.loads(done.stdout)


def _installed(python: str, layout: dict[str, str], wanted: set[str]) -> list[Repository]:
    """The interpreter's repositories (those named in ``wanted``, when it names any)."""
    repos = []
    if not wanted or STDLIB in wanted:
        stdlib = stdlib_repository(python, layout["stdlib"], layout["base"], required=STDLIB in wanted)
        repos += [] if stdlib is None else [stdlib]
    for folder in sorted({layout["purelib"], layout["platlib"]}):
        if not os.path.isdir(folder):
            continue
        for entry in sorted(Path(folder).iterdir()):
            if wanted and _repository_name(entry.name) not in wanted:
                continue
            if entry.is_dir() and (entry / "__init__.py").is_file():
                repo = _package(python, entry)
                if repo is not None and repo.name not in {r.name for r in repos}:
                    repos.append(repo)
    return repos


def stdlib_repository(python: str, stdlib: str, base: str, required: bool) -> Repository | None:
    """The standard library as a repository, if its test suite is installed; when it is not,
    ``InputError`` if ``required`` (the user named it), else None."""
    tests = Path(stdlib) / "test"
    modules = sorted(
        f"test.{p.stem if p.suffix == '.py' else p.name}"
        for p in (tests.iterdir() if tests.is_dir() else ())
        if p.name.startswith("test_") and (p.suffix == ".py" or (p / "__init__.py").is_file())
    )
    # CPython installs some 400 test modules. Debian and Ubuntu ship them apart and leave a stub
    # (``test/support`` and ``test_support.py``): tasks built from that would be a handful at best.
    if len(modules) < STDLIB_SUITE_MODULES:
        if required:
            raise InputError(
                f"the standard library of {python} has no test suite under {tests} ({len(modules)} test "
                f"module(s)); Debian and Ubuntu ship it apart: apt-get install lib{Path(stdlib).name}-testsuite"
            )
        return None
    checkout = Checkout(base, stdlib, stdlib, "unittest")
    exclude = ("site-packages/*", "dist-packages/*")
    return Repository(STDLIB, checkout, tuple(modules), exclude, subjects_by_name=True)


def _package(python: str, folder: Path) -> Repository | None:
    """A package folder as a repository, if it ships tests; its runner from how they are written."""
    name = _repository_name(folder.name)
    if (
        not (folder / "__init__.py").is_file() or not name or not name[0].isalpha() or name in {"pytest", "pluggy"}
    ):  # the runner tests itself
        return None
    files = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_FOLDERS)
        inner = os.path.relpath(dirpath, folder)
        parts = [] if inner == "." else inner.split(os.sep)
        if not TEST_FOLDERS.intersection(parts):
            continue
        # A conftest.py configures the tests beside it: it is not a test module itself.
        files += [
            os.path.join(dirpath, f) for f in filenames if f.endswith(".py") and is_test_file(f) and f != "conftest.py"
        ]
    if not files:
        return None
    import_root = str(folder.parent)
    uses_pytest = (
        any(os.path.exists(os.path.join(os.path.dirname(f), "conftest.py")) or _mentions_pytest(f) for f in files)
        or (folder / "conftest.py").exists()
    )
    if uses_pytest:
        modules = tuple(sorted(os.path.relpath(f, import_root) for f in files))
        runner = "pytest"
    else:
        modules = tuple(sorted(_module_name(f, import_root) for f in files if _importable(f, folder)))
        runner = "unittest"
    return Repository(name, Checkout(python, import_root, str(folder), runner), modules)


def _repository_name(folder: str) -> str:
    return _NAME.sub("-", folder.lower()).strip("_-")


def _mentions_pytest(path: str) -> bool:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "import pytest" in text or "from pytest" in text


def _importable(path: str, package: Path) -> bool:
    """Whether every folder from the package down to the file is a package (unittest loads by name)."""
    folder = Path(path).parent
    while folder != package.parent:
        if not (folder / "__init__.py").is_file():
            return False
        folder = folder.parent
    return True


def _module_name(path: str, import_root: str) -> str:
    return os.path.relpath(path, import_root).removesuffix(".py").replace(os.sep, ".")
