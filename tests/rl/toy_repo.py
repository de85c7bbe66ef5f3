"""A small repository written for the tests: a package with functions whose tests decide, by
construction, what the builder keeps, drops and why, and what a rollout scores."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from rl.functions import KIND, find_functions
from rl.sandbox import Checkout
from rl.tasks import Task, split_of, task_id

# A fixed mtime for stamp.py: its test checks it, and a rollout's copy of the file does not keep it.
STAMP_MTIME = 1_000_000_000

CORE = '''"""Functions with tests that depend on them."""


def add(a, b):
    """Add two numbers."""
    return a + b


def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


def helper():
    return 42


def check(x):
    """Refuse negative numbers."""
    if x < 0:
        raise ValueError(x)
'''

STAMP = """import os


def stamp():
    return int(os.stat(__file__).st_mtime)
"""

TESTS = """import pytest

from toy.core import add, check, clamp, helper
from toy.stamp import stamp


def test_add():
    assert add(1, 2) == 3


def test_add_strings():
    assert add("a", "b") == "ab"


def test_clamp_low():
    assert clamp(-1, 0, 5) == 0


def test_clamp_high():
    assert clamp(9, 0, 5) == 5


def test_helper_result_is_ignored():
    try:
        helper()
    except Exception:
        pass


def test_check_accepts_positive_numbers():
    check(1)


def test_stamp():
    assert stamp() == {mtime}


@pytest.mark.skip(reason="never runs")
def test_skipped():
    assert add(0, 0) == 0
"""


def write_toy_repository() -> Path:
    """The package folder of a fresh toy repository, readable by the sandbox's user (not under a
    folder only root may enter, as pytest's tmp_path is); the caller removes its parent."""
    root = Path(tempfile.mkdtemp(prefix="rl-toy-", dir="/tmp"))
    root.chmod(0o755)
    package = root / "toy"
    (package / "tests").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "core.py": CORE,
        "stamp.py": STAMP,
        "tests/__init__.py": "",
        "tests/test_core.py": TESTS.replace("{mtime}", str(STAMP_MTIME)),
    }
    for name, text in files.items():
        (package / name).write_text(text)
    os.utime(package / "stamp.py", (STAMP_MTIME, STAMP_MTIME))
    for path in [package, package / "tests", *package.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return package


def remove_toy_repository(package: Path) -> None:
    shutil.rmtree(package.parent, ignore_errors=True)


def toy_task(package: Path, qualname: str, tests: list[str], file: str = "core.py", python: str | None = None) -> Task:
    """A task of the toy repository made without a build (its lineage columns are placeholders)."""
    return task_of(
        Checkout(python or sys.executable, str(package.parent), str(package), "pytest"),
        f"{package.name}/{file}",
        qualname,
        [f"{package.name}/tests/test_core.py::{test}" for test in tests],
    )


def task_of(checkout: Checkout, path: str, qualname: str, tests: list[str]) -> Task:
    """A task of any repository's function, made without a build (placeholder lineage)."""
    text = (Path(checkout.repo_root).parent / path).read_text(encoding="utf-8")
    (function,) = [f for (name, _), f in find_functions(text).items() if name == qualname]
    assert not isinstance(function, str), function
    sha = hashlib.sha256(text.encode()).hexdigest()
    identifier = task_id(KIND, "toy", path, qualname, function.first_line, sha)
    return Task(
        task_id=identifier, kind=KIND, split=split_of(identifier), repository=Path(checkout.repo_root).name,
        snapshot_table="raw.none", snapshot_id=0, doc_id="", path=path, source_sha256=sha, qualname=qualname,
        first_line=function.first_line, body_start_line=function.body_start_line,
        body_end_line=function.body_end_line, indent=function.indent, prompt=function.prompt,
        original_body=function.body, single_return=function.single_return, runner=checkout.runner,
        python=checkout.python, import_root=checkout.import_root, repo_root=checkout.repo_root, tests=tuple(tests),
        tests_traced=len(tests), original_reward=1.0, raise_reward=0.0, empty_reward=0.0,
    )  # fmt: skip


def tree_digest(folder: Path) -> str:
    """A digest of every file under ``folder`` (names, bytes and modes): what a rollout must not change."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(f"{path.relative_to(folder)}\x00{path.stat().st_mode}\x00".encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()
