"""The environment builder end to end: real Spark, the real sandbox, a real Iceberg catalog."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from factory_cli.rl_build import format_result
from lakehouse.catalog import load_table
from lakehouse.commit import snapshot_stats
from lakehouse.errors import InputError, MissingDependencyError, PublishRefusedError
from rl.build import BuildOptions, build
from rl.repositories import STDLIB_SUITE_MODULES, find_repositories, stdlib_repository
from rl.rollouts import score
from rl.tasks import read_tasks
from tests.conftest import run_factory
from tests.rl.conftest import needs_stdlib_tests
from tests.rl.toy_repo import remove_toy_repository, write_toy_repository


@pytest.fixture
def toy():
    package = write_toy_repository()
    yield package
    remove_toy_repository(package)


def _toy_options(toy, **changes) -> BuildOptions:
    return BuildOptions(paths=(str(toy),), test_timeout=10, **changes)


@pytest.mark.slow
@needs_stdlib_tests
def test_a_small_build_from_the_standard_library_and_a_package(spark, catalog, toy):
    opts = BuildOptions(
        repositories=("stdlib",),
        paths=(str(toy),),
        include_tests=("test.test_colorsys", "toy/tests/*"),
        test_timeout=10,
    )
    result = build(spark, catalog, opts)
    tasks = read_tasks(catalog)
    by_name = {(t.repository, t.qualname): t for t in tasks}
    # The toy's functions: two kept; helper's test ignores it, check's passes with an empty body,
    # stamp's test depends on the file's mtime, which a rollout's copy does not keep.
    assert {q for r, q in by_name if r == "toy"} == {"add", "clamp"}
    stats = result.stats
    assert stats["dropped.empty-body-passes"] == 1 and stats["dropped.original-fails"] == 1
    # The toy's helper, whose test passes whatever it does. test.test_colorsys also calls functions
    # of other modules through test.support (threading, where the interpreter has not imported it
    # at start-up): not colorsys's, so not tasks, on any interpreter.
    assert stats["dropped.raise-body-passes"] == 1
    assert stats["skipped.not-the-subject"] > 0
    assert stats["tests-failed"] == 1  # the skipped test
    assert {q for r, q in by_name if r == "stdlib"} >= {"rgb_to_yiq", "yiq_to_rgb", "rgb_to_hsv", "hsv_to_rgb"}
    assert stats["tasks"] == len(tasks) and stats["candidates"] == len(tasks) + 3
    assert snapshot_stats(load_table(catalog, ("rl", "tasks")).current_snapshot()) == stats
    add = by_name[("toy", "add")]
    assert set(add.tests) == {
        "toy/tests/test_core.py::test_add",
        "toy/tests/test_core.py::test_add_strings",
    }
    assert add.single_return and add.runner == "pytest" and add.prompt.endswith('"""Add two numbers."""\n')
    colorsys = by_name[("stdlib", "rgb_to_hsv")]
    assert colorsys.runner == "unittest" and colorsys.path.endswith("/colorsys.py")
    assert all(t.split in ("train", "heldout") and t.kind == "function-body" for t in tasks)
    assert all((t.original_reward, t.raise_reward) == (1.0, 0.0) and t.empty_reward < 1 for t in tasks)
    # Lineage: each task's file is a document of the raw snapshot it names, with the same text.
    raw = load_table(catalog, ("raw", "rl_repositories"))
    for task in (add, colorsys):
        (document,) = raw.scan(snapshot_id=task.snapshot_id).filter(f"doc_id == '{task.doc_id}'").to_arrow().to_pylist()
        assert document["path"] == task.path
        assert hashlib.sha256(document["text"].encode()).hexdigest() == task.source_sha256
    # The tasks score as validated: the original 1, a raising body 0.
    results = score([add, colorsys, add], [add.original_body, colorsys.original_body, "    raise ValueError\n"])
    assert [r.reward for r in results] == [1.0, 1.0, 0.0]


def test_the_same_trees_give_the_same_tasks_whatever_the_parallelism(spark, catalog, toy):
    one = build(spark, catalog, _toy_options(toy, output="rl.tasks_one", parallelism=1, run_id="one"))
    three = build(spark, catalog, _toy_options(toy, output="rl.tasks_three", parallelism=3))
    rows = [
        sorted(load_table(catalog, ("rl", name)).scan().to_arrow().to_pylist(), key=lambda r: r["task_id"])
        for name in ("tasks_one", "tasks_three")
    ]
    assert rows[0] == rows[1] and len(rows[0]) == 2
    assert one.stats["tasks"] == three.stats["tasks"] == 2
    printed = format_result(one)
    assert "rl.tasks_one@" in printed and ": 2 tasks" in printed and "dropped.original-fails=1" in printed
    again = build(spark, catalog, _toy_options(toy, output="rl.tasks_one", parallelism=1, run_id="one"))
    assert again.already_committed and again.tasks.snapshot_id == one.tasks.snapshot_id


def test_a_tag_named_as_the_runs_audit_branch_is_refused_before_any_tracing(spark, catalog, toy, monkeypatch):
    import rl.build

    build(spark, catalog, _toy_options(toy, output="rl.tagged", run_id="one"))
    table = load_table(catalog, ("rl", "tagged"))
    # Only an older version or another engine can make such a tag: `factory tag` refuses audit-*.
    table.manage_snapshots().create_tag(table.current_snapshot().snapshot_id, "audit-two").commit()
    refs = dict(load_table(catalog, ("rl", "tagged")).metadata.refs)

    def traced(*_args):
        raise AssertionError("the build traced the tests before checking its audit branch")

    monkeypatch.setattr(rl.build, "_tasks", traced)
    with pytest.raises(PublishRefusedError, match="has a tag 'audit-two'"):
        build(spark, catalog, _toy_options(toy, output="rl.tagged", run_id="two"))
    assert dict(load_table(catalog, ("rl", "tagged")).metadata.refs) == refs


def test_the_command_refuses_bad_options_before_starting_spark(factory_home, toy, tmp_path):
    done = run_factory("rl", "build", "--repository", "no-such-package", "--path", str(toy))
    assert done.returncode == 2
    assert re.search(r"no repository named no-such-package under .*: choose among .*\bjoblib\b", done.stderr)
    # The installed command as a user runs it: from another folder, the checkout not on the path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = [str(Path(sys.executable).with_name("factory")), "rl", "build", "--repository", "no-such-package"]
    done = subprocess.run(script, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "no repository named no-such-package" in done.stderr, done.stderr[-2000:]
    done = run_factory("rl", "build", "--path", str(toy), "--max-functions", "0")
    assert done.returncode == 2 and "--max-functions must be at least 1" in done.stderr
    for bad in ("nan", "inf"):  # a Spark task's traceback before
        done = run_factory("rl", "build", "--path", str(toy), "--test-timeout", bad)
        assert done.returncode == 2 and "--test-timeout must be a positive number" in done.stderr, done.stderr[-2000:]
    done = run_factory("rl", "build", "--path", str(toy), "--run-id", "bad id/../x")  # after the ingest before
    assert done.returncode == 2 and "invalid run id 'bad id/../x'" in done.stderr and "Spark" not in done.stderr
    done = run_factory("rl", "build", "--path", str(toy.parent))
    assert done.returncode == 2 and "is not a package folder with tests" in done.stderr


def test_a_standard_library_without_its_test_suite_is_refused_when_named_and_left_out_otherwise(tmp_path):
    stdlib = tmp_path / "python3.11"
    (stdlib / "test" / "support").mkdir(parents=True)
    (stdlib / "test" / "test_support.py").write_text("")  # what Debian leaves without libpython3.11-testsuite
    with pytest.raises(InputError, match=r"no test suite .*apt-get install libpython3\.11-testsuite"):
        stdlib_repository("/usr/bin/python3.11", str(stdlib), "/usr/bin/python3.11", required=True)
    assert stdlib_repository("/usr/bin/python3.11", str(stdlib), "/usr/bin/python3.11", required=False) is None

    for n in range(STDLIB_SUITE_MODULES):
        (stdlib / "test" / f"test_m{n}.py").write_text("")
    found = stdlib_repository("/usr/bin/python3.11", str(stdlib), "/usr/bin/python3.11", required=True)
    assert found is not None and "test.test_m0" in found.test_modules


def test_a_standard_library_test_module_tests_the_module_it_is_named_for(tmp_path):
    stdlib = tmp_path / "python3.11"
    (stdlib / "test").mkdir(parents=True)
    for n in range(STDLIB_SUITE_MODULES):
        (stdlib / "test" / f"test_m{n}.py").write_text("")
    repo = stdlib_repository("/usr/bin/python3.11", str(stdlib), "/usr/bin/python3.11", required=True)
    assert repo is not None
    assert repo.tests_path("test.test_colorsys", "python3.11/colorsys.py")
    assert repo.tests_path("test.test_json", "python3.11/json/decoder.py")
    assert not repo.tests_path("test.test_json", "python3.11/json_extra.py")
    assert not repo.tests_path("test.test_colorsys", "python3.11/threading.py")


def test_a_conftest_configures_a_packages_tests_but_is_not_a_test_module(tmp_path):
    package = tmp_path / "pkg"
    (package / "tests").mkdir(parents=True)
    for name, text in (("__init__.py", ""), ("tests/__init__.py", ""), ("tests/conftest.py", "import pytest\n")):
        (package / name).write_text(text)
    with pytest.raises(InputError, match="is not a package folder with tests"):
        find_repositories(sys.executable, paths=[str(package)])
    (package / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")
    (repo,) = find_repositories(sys.executable, paths=[str(package)])
    assert repo.test_modules == ("pkg/tests/test_a.py",) and repo.checkout.runner == "pytest"


def test_a_machine_without_the_repository_sandbox_is_refused_before_anything_is_ingested(catalog, toy, monkeypatch):
    import rl.sandbox

    monkeypatch.setattr(rl.sandbox, "_bwrap_works", lambda: False)  # the machine's probe: no bubblewrap here
    with pytest.raises(MissingDependencyError, match=r"apt-get install bubblewrap"):
        build(None, catalog, _toy_options(toy))  # no Spark: it must not get that far
    assert not catalog.table_exists(("raw", "rl_repositories"))


def test_the_sandbox_probe_looks_for_bubblewrap_where_a_rollout_launches_it(tmp_path, monkeypatch):
    """A bwrap on the caller's PATH but not on the sandbox's (/usr/bin:/bin) passed the probe, and then
    every rollout failed to start it; the probe now looks with the sandbox's PATH."""
    import rl.sandbox

    monkeypatch.setitem(rl.sandbox._ENV, "PATH", str(tmp_path))  # a sandbox PATH without bubblewrap
    rl.sandbox._bwrap_works.cache_clear()
    try:
        with pytest.raises(MissingDependencyError, match=rf"on {tmp_path}, the sandbox's PATH"):
            rl.sandbox.require_bwrap()
    finally:
        rl.sandbox._bwrap_works.cache_clear()


def test_a_bad_option_or_repository_is_refused_before_spark_starts(toy, monkeypatch, capsys):
    """Refused in a second, with no JVM started: not after Spark's start and its noise on exit."""
    import pipelines.spark_session
    from factory_cli.main import main

    started: list[tuple] = []
    monkeypatch.setattr(pipelines.spark_session, "start_spark_early", lambda *args: started.append(args))
    refusals = {
        "--max-functions must be at least 1": ["--path", str(toy), "--max-functions", "0"],
        "no repository named no-such-package": ["--path", str(toy), "--repository", "no-such-package"],
        "is not a package folder with tests": ["--path", str(toy.parent)],
    }
    for message, options in refusals.items():
        assert main(["rl", "build", *options]) == 2
        assert message in capsys.readouterr().err
    assert started == []
