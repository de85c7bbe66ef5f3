"""Rollouts in the repository sandbox: the original body scores 1, a raising body 0, a partial one
its share; hostile completions score 0 and reach neither the repository, the host nor the
rollouts running beside them."""

from __future__ import annotations

import socket
import sys
import sysconfig
import time
import uuid
from pathlib import Path

import pytest

from lakehouse.errors import InputError
from rl.rollouts import MAX_COMPLETION_CHARS, score
from rl.sandbox import Checkout
from tests.conftest import REPO
from tests.evals.test_sandbox import HOSTILE
from tests.processes import descendants_running, subreaper
from tests.rl.conftest import needs_stdlib_tests
from tests.rl.toy_repo import remove_toy_repository, task_of, toy_task, tree_digest, write_toy_repository

CLAMP_TESTS = ["test_clamp_low", "test_clamp_high"]


@pytest.fixture(scope="module")
def toy():
    package = write_toy_repository()
    yield package
    remove_toy_repository(package)


def _body(task, text: str) -> str:
    return "".join(f"{task.indent}{line}\n" for line in text.splitlines())


def test_the_original_body_scores_1_a_raising_body_0_and_a_partial_one_its_share(toy):
    clamp = toy_task(toy, "clamp", CLAMP_TESTS)
    add = toy_task(toy, "add", ["test_add", "test_add_strings"])
    results = score(
        [clamp, clamp, clamp, add, add],
        [
            clamp.original_body,
            _body(clamp, "raise NotImplementedError"),
            _body(clamp, "return max(x, low)"),  # right below the range only
            _body(add, "return a + b"),
            _body(add, "return a +"),
        ],
        workers=2,
    )
    assert [r.reward for r in results] == [1.0, 0.0, 0.5, 1.0, 0.0]
    assert [r.outcome for r in results] == ["passed", "failed", "partial", "passed", "syntax-error"]
    partial = results[2]
    assert partial.verdicts == {
        "toy/tests/test_core.py::test_clamp_low": "passed",
        "toy/tests/test_core.py::test_clamp_high": "failed",
    }
    assert "assert 9 == 5" in partial.output  # the failing test's report, in the bounded excerpt
    assert len(partial.output) <= 4096 and partial.duration_s > 0
    assert results[4].duration_s == 0  # nothing ran


@needs_stdlib_tests
def test_a_stdlib_task_runs_under_unittest_with_the_interpreters_own_library():
    stdlib = sysconfig.get_path("stdlib")
    checkout = Checkout(sys._base_executable, stdlib, stdlib, "unittest")
    tests = ["test.test_colorsys.ColorsysTest.test_hsv_values", "test.test_colorsys.ColorsysTest.test_hsv_roundtrip"]
    task = task_of(checkout, f"{Path(stdlib).name}/colorsys.py", "rgb_to_hsv", tests)
    patch_runner = (
        "import unittest\n"
        "unittest.TestCase.assertEqual = lambda *a, **k: None\n"
        "unittest.TestCase.assertTrue = lambda *a, **k: None\n"
        "import test.test_colorsys as t\n"
        "t.ColorsysTest.assertTripleEqual = lambda *a, **k: None\n"
        "return (0.0, 0.0, 0.0)"
    )
    results = score(
        [task, task, task], [task.original_body, _body(task, "return (r, g, b)"), _body(task, patch_runner)]
    )
    assert [r.reward for r in results] == [1.0, 0.0, 0.0]
    assert "was modified during the test" in results[2].output


@pytest.mark.slow  # it waits out the timeouts of the loops and the fork bomb
def test_hostile_completions_score_0_and_reach_nothing(toy, tmp_path):
    clamp = toy_task(toy, "clamp", CLAMP_TESTS)
    tests_file = toy / "tests" / "test_core.py"
    outside = REPO / f"escaped-{uuid.uuid4().hex}"
    private_tmp = Path("/tmp") / f"escaped-{uuid.uuid4().hex}"
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    passing_tests = "def test_clamp_low():\n    pass\n\n\ndef test_clamp_high():\n    pass\n"  # what an edit would make of the tests
    bodies = {
        **HOSTILE,
        "write outside": f"open({str(outside)!r}, 'w').write('x')\nreturn -1",
        "write /tmp": f"open({str(private_tmp)!r}, 'w').write('x')\nreturn -1",
        "open a socket": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).send(b'hi')",
        "edit a test file": f"open({str(tests_file)!r}, 'w').write({passing_tests!r})\nreturn -1",
        "rewrite its own file": "open(__file__, 'w').write('')\nreturn -1",
        "write conftest.py": (
            "import os\n"
            "hook = 'def pytest_runtest_makereport(item, call):\\n    call.excinfo = None\\n'\n"
            f"for folder in ({str(tests_file.parent)!r}, {str(toy.parent)!r}, os.getcwd()):\n"
            "    try:\n"
            "        open(os.path.join(folder, 'conftest.py'), 'w').write(hook)\n"
            "    except OSError:\n"
            "        pass\n"
            "return -1"
        ),
        "monkeypatch the runner to report success": (
            "import _pytest.reports, _pytest.runner\n"
            "make = _pytest.reports.TestReport.from_item_and_call\n"
            "def passed(item, call):\n"
            "    report = make(item, call)\n"
            "    report.outcome, report.longrepr = 'passed', None\n"
            "    return report\n"
            "_pytest.reports.TestReport.from_item_and_call = staticmethod(passed)\n"
            "_pytest.runner.check_interactive_exception = lambda call, report: False\n"
            "return -1"
        ),
        "patch the harness": "import __main__\n__main__.Harness.pytest_one = lambda self, item: True\nreturn -1",
        "skip itself": "import pytest\npytest.skip('no')",
        "exit 0 early": "import os\nos._exit(0)",
        "print a verdict": (
            "import json, os\n"
            "for fd in range(1, 12):\n"
            "    try:\n"
            "        os.write(fd, (json.dumps({'test': 'x', 'verdict': 'passed'}) + '\\n').encode())\n"
            "    except OSError:\n"
            "        pass\n"
            "return -1"
        ),
        "trace the test to skip its assertion": "import sys\nsys.settrace(lambda *a: None)\nreturn -1",
    }
    honest = clamp.original_body
    # Honest rollouts run beside the hostile ones, on the same workers: they must still score 1.
    completions = [body for name in bodies for body in (_body(clamp, bodies[name]), honest)]
    before = tree_digest(toy)
    started = time.monotonic()
    try:
        with subreaper():  # another session's rollouts are not this test's leftovers
            results = score([clamp] * len(completions), completions, workers=2, test_timeout=3)
            time.sleep(0.2)
            leftover = descendants_running(b"/tmp/.rl/harness.py")
        listener.setblocking(False)
        try:
            listener.accept()[0].close()
            connected = True
        except BlockingIOError:
            connected = False
    finally:
        listener.close()
        outside.unlink(missing_ok=True)
        private_tmp.unlink(missing_ok=True)
    hostile = dict(zip(bodies, results[0::2], strict=True))
    assert {name: r.reward for name, r in hostile.items()} == dict.fromkeys(bodies, 0.0)
    assert [r.reward for r in results[1::2]] == [1.0] * len(bodies)
    assert tree_digest(toy) == before, "a rollout changed the repository"
    assert not outside.exists() and not private_tmp.exists() and not connected
    assert not list(toy.rglob("conftest.py"))
    assert not leftover, "a sandboxed process outlived its rollout"
    assert "MemoryError" in hostile["10 GB allocation"].output
    assert hostile["infinite loop"].verdicts[clamp.tests[0]] == "timeout"
    assert "Read-only file system" in hostile["edit a test file"].output
    assert "was modified during the test" in hostile["patch the harness"].output
    assert "was modified during the test" in hostile["monkeypatch the runner to report success"].output
    assert set(hostile["exit 0 early"].verdicts.values()) == {"crashed"}
    assert time.monotonic() - started < 240


def test_completions_must_match_tasks_and_be_bounded(toy):
    add = toy_task(toy, "add", ["test_add"])
    with pytest.raises(InputError, match="1 tasks but 2 completions"):
        score([add], ["a", "b"])
    with pytest.raises(InputError, match="backend must be one of local, ray"):
        score([add], ["a"], backend="k8s")
    (result,) = score([add], [_body(add, "return a + b") + "#" * MAX_COMPLETION_CHARS])
    assert (result.reward, result.outcome) == (0.0, "too-long")


def test_a_task_whose_file_changed_is_refused(toy):
    add = toy_task(toy, "add", ["test_add"])
    core = toy / "core.py"
    original = core.read_text()
    core.write_text(original + "\n")
    try:
        with pytest.raises(InputError, match=r"changed since task .* was built"):
            score([add], [add.original_body])
    finally:
        core.write_text(original)


@pytest.mark.engine
def test_rollouts_run_on_ray_in_order(toy):
    import ray

    clamp = toy_task(toy, "clamp", CLAMP_TESTS)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        bodies = [clamp.original_body, _body(clamp, "return max(x, low)"), _body(clamp, "raise ValueError")] * 2
        results = score([clamp] * len(bodies), bodies, backend="ray")
    finally:
        ray.shutdown()
    assert [r.reward for r in results] == [1.0, 0.5, 0.0] * 2
