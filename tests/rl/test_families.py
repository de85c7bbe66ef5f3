"""The generated family: its tasks, the held-out split, and rewards from running the tests in the sandbox."""

from __future__ import annotations

import pytest

from rl.families import arithmetic_tasks, is_heldout, sandbox_reward


def _answer(task) -> str:
    """The right expression for a task, from its id (``arithmetic/<op>-<digit>/<function>/<argument>``)."""
    _, op, _, argument = task.id.split("/")
    name, _, digit = op.partition("-")
    return {"identity": argument, "const": digit, "plus": f"{argument} + {digit}"}.get(name) or {
        "minus": f"{argument} - {digit}",
        "times": f"{digit} * {argument}",
    }[name]


def test_the_family_and_its_split():
    tasks = arithmetic_tasks()
    assert len(tasks) == len({t.id for t in tasks}) == 888
    assert tasks == arithmetic_tasks()  # the same tasks in the same order every time
    heldout = [t for t in tasks if is_heldout(t.id, 0.1)]
    assert 60 < len(heldout) < 120 and heldout == [t for t in arithmetic_tasks() if is_heldout(t.id, 0.1)]
    task = next(t for t in tasks if t.id == "arithmetic/times-7/g/n")
    assert task.prompt == "# Return n times 7.\ng = lambda n:"
    assert task.expected == (0, 7, 21, -14)


def test_the_right_expression_earns_1_and_wrong_ones_the_share_of_tests_they_pass():
    tasks = arithmetic_tasks()[::24]  # every op, over the function and argument names
    reward = sandbox_reward(timeout_s=5, workers=2)
    assert [s.reward for s in reward(tasks, [f" {_answer(t)}" for t in tasks])] == [1.0] * len(tasks)

    task = next(t for t in arithmetic_tasks() if t.id == "arithmetic/plus-3/h/x")
    completions = [" x + 3", " 3 + x", " x", " 3", " None", " y", "", " (x", " x + 3.0"]
    # compiles · returns an int at 2 · right at 0, 1, 3, -2
    results = reward([task] * len(completions), completions)
    assert [s.reward for s in results] == pytest.approx([1, 1, 2 / 6, 3 / 6, 1 / 6, 1 / 6, 0, 0, 1 / 6])
    assert [(s.passed, s.total) for s in results] == [
        (6, 6),
        (6, 6),
        (2, 6),
        (3, 6),
        (1, 6),
        (1, 6),
        (0, 6),
        (0, 6),
        (1, 6),
    ]
    assert [s.outcome for s in results][::3] == ["passed", "partial", "syntax-error"]
    assert results[6].duration_s == 0 and results[0].duration_s > 0
    # What the program printed, without the sentinel's line: new at each call, it would make a run's rows differ.
    assert all("arithmetic-checked" not in s.output for s in results)


def test_completions_that_attack_the_check_score_0():
    task = next(t for t in arithmetic_tasks() if t.id == "arithmetic/identity/f/x")
    hostile = [
        " x or __import__('os')._exit(0)",  # ends the program, exit status 0, before the check prints
        " print('arithmetic-checked-0 6 6')",  # a result line without the run's sentinel
        " __import__('time').sleep(60)",  # killed at the timeout
    ]
    results = sandbox_reward(timeout_s=2, workers=2)([task] * len(hostile), hostile)
    rewards = [s.reward for s in results]
    assert [s.outcome for s in results] == ["error", "partial", "timeout"]
    assert rewards[0] == 0.0 and rewards[2] == 0.0
    assert rewards[1] == pytest.approx(1 / 6)  # it compiled; its own printed lines count for nothing
