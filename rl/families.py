"""Generated task families: short functions whose answer is one expression, rewarded by running tests.

``arithmetic``: a function of one argument, a comment saying what it returns, the prompt ending
where its expression starts::

    # Return n times 7.
    g = lambda n:

The completion is the rest of that line (the family's stop string is the newline). The program
``prompt + completion`` and a check run in the sandbox (``evals/sandbox.py``, one program per
distinct completion); the reward is the share of 6 tests that pass: the function compiles, ``g(2)``
returns an ``int``, and ``g`` returns the right ``int`` at 4 inputs. So ``None`` earns 1/6 here,
``7`` 1/2 (it compiles, returns an int, the right one at 1), ``n * 7`` earns 1. The first tests are
what a barely trained model can pass by chance, and give GRPO something to compare from the
first step. A lambda rather than a ``def … return``: an empty completion (``return`` alone) would
compile and earn a reward, and a policy collapses onto ending at once (measured: held-out reward
stuck at 1/6 within 25 steps). A completion that does not compile scores 0 without being run: in the sandbox its
program could only end in a SyntaxError. The ops (the argument itself, a constant, plus, minus and times a digit) over
6 argument names and 4 function names make 888 tasks; a task is held out by a hash of its id, so
the split is the same in every run.

The check runs in the same program as the completion, so a completion written to attack it (read
the program's sentinel, print a fake result) could: this family is for proving that the learner
learns, not for scoring hostile code, which the repository tasks' rollouts isolate from their tests.
"""

from __future__ import annotations

import hashlib
import secrets
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from evals.sandbox import Limits, Outcome, run_programs, sandbox_mode
from rl.scored import Scored, bounded, outcome_of

ARGUMENTS = ("x", "y", "a", "b", "n", "k")
FUNCTIONS = ("f", "g", "h", "calc")
DIGITS = range(1, 10)
INPUTS = (0, 1, 3, -2)  # where each value test calls the function
TYPE_PROBE = 2  # the input of the "returns an int" test
STOP = ("\n",)


@dataclass(frozen=True)
class ArithmeticTask:
    id: str
    prompt: str
    function: str  # the name the check calls
    expected: tuple[int, ...]  # the right value at each of INPUTS


def _ops() -> list[tuple[str, str, object]]:
    """(name, docstring with {a} for the argument, value as a function of the argument)."""
    ops: list[tuple[str, str, object]] = [("identity", "Return {a}.", lambda v: v)]
    for d in DIGITS:
        ops.append((f"const-{d}", f"Return {d}.", lambda v, d=d: d))
        ops.append((f"plus-{d}", f"Return {{a}} plus {d}.", lambda v, d=d: v + d))
        ops.append((f"minus-{d}", f"Return {{a}} minus {d}.", lambda v, d=d: v - d))
        ops.append((f"times-{d}", f"Return {{a}} times {d}.", lambda v, d=d: v * d))
    return ops


def arithmetic_tasks() -> list[ArithmeticTask]:
    """Every task of the family, in a fixed order."""
    tasks = []
    for name, doc, value in _ops():
        for function in FUNCTIONS:
            for argument in ARGUMENTS:
                prompt = f"# {doc.format(a=argument)}\n{function} = lambda {argument}:"
                expected = tuple(value(v) for v in INPUTS)
                tasks.append(ArithmeticTask(f"arithmetic/{name}/{function}/{argument}", prompt, function, expected))
    return tasks


def is_heldout(task_id: str, fraction: float) -> bool:
    """Whether a task is held out: by a hash of its id, so the split never depends on a run."""
    bucket = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big") / 2**64
    return bucket < fraction


def program(task: ArithmeticTask, completion: str, sentinel: str) -> str:
    """The program a completion is judged by: it prints ``sentinel passed total`` last.

    Reaching the check at all is the first test passed: the function compiled and was defined."""
    cases = list(zip(INPUTS, task.expected, strict=True))
    return f"""{task.prompt}{completion}


def __check():
    passed = 1
    try:
        passed += type({task.function}({TYPE_PROBE})) is int
    except BaseException:
        pass
    for argument, expected in {cases!r}:
        try:
            got = {task.function}(argument)
            passed += type(got) is int and got == expected
        except BaseException:
            pass
    print({sentinel!r}, passed, {len(cases) + 2})


__check()
"""


def tests_passed(output: str, ok: bool, sentinel: str) -> tuple[int, int] | None:
    """``(passed, total)`` from the last line of the program's stdout; None if it did not end well."""
    lines = output.rstrip("\n").splitlines()
    if not ok or not lines:
        return None
    fields = lines[-1].split(" ")
    if len(fields) != 3 or fields[0] != sentinel or not (fields[1].isdigit() and fields[2].isdigit()):
        return None
    passed, total = int(fields[1]), int(fields[2])
    return (passed, total) if 0 <= passed <= total and total else None


def scored(outcome: Outcome, sentinel: str) -> Scored:
    """A program's run as the learner records it. The sentinel's line is left out of the output:
    it is new at each call, and the rows of a run are the same at each run."""
    counts = tests_passed(outcome.stdout, outcome.passed, sentinel)
    passed, total = counts or (0, len(INPUTS) + 2)
    verdict = outcome_of(passed, total) if counts else "timeout" if outcome.status == "timeout" else "error"
    stdout = "".join(line for line in outcome.stdout.splitlines(keepends=True) if not line.startswith(sentinel))
    return Scored(passed / total, passed, total, verdict, bounded(stdout + outcome.stderr), outcome.duration_s)


def compiles(source: str) -> bool:
    """Whether ``source`` is valid Python: compiled, never run (``compile`` executes nothing)."""
    try:
        with warnings.catch_warnings():  # "invalid decimal literal" and the like: the run would say so
            warnings.simplefilter("ignore")
            compile(source, "<completion>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):  # ValueError: a null byte
        return False
    return True


def sandbox_reward(timeout_s: float, workers: int | None):
    """A reward function running each distinct (task, completion) once, in its own sandbox.

    Identical completions of one task are run once: the program is the same, and the family's
    programs are deterministic. A policy that has converged draws many duplicates."""
    mode = sandbox_mode()  # refuse at start-up, before any rollout, if no sandbox works here
    limits = Limits(wall_s=timeout_s, cpu_s=max(1, int(timeout_s)))
    not_compiled = Scored(0.0, 0, len(INPUTS) + 2, "syntax-error", "", 0.0)

    def reward(tasks: Sequence[ArithmeticTask], completions: Sequence[str]) -> list[Scored]:
        sentinel = f"arithmetic-checked-{secrets.token_hex(16)}"  # a new one per call: not guessable
        by_id = {task.id: task for task in tasks}
        pairs = dict.fromkeys((task.id, text) for task, text in zip(tasks, completions, strict=True))
        results = {key: not_compiled for key in pairs if not compiles(by_id[key[0]].prompt + key[1])}
        distinct = [key for key in pairs if key not in results]
        sources = [program(by_id[task_id], text, sentinel) for task_id, text in distinct]
        outcomes = run_programs(sources, limits, workers=workers, mode=mode) if sources else []
        results |= {key: scored(o, sentinel) for key, o in zip(distinct, outcomes, strict=True)}
        return [results[(task.id, text)] for task, text in zip(tasks, completions, strict=True)]

    return reward
