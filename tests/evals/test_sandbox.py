"""The sandbox on real programs: HumanEval's canonical solutions pass, broken ones fail, hostile
ones are contained and reported as failures while this (the evaluating) process carries on."""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from evals.sandbox import (
    EXIT_REASONS,
    MODES,
    SLOT_UID_BASE,
    Limits,
    _works,
    claimed_uid,
    run_programs,
    sandbox_mode,
)
from evals.suites.humaneval import new_sentinel, pass_at_k, passed, problems, program
from lakehouse.errors import MissingDependencyError
from lakehouse.schemas import SAMPLE_OUTPUT_BYTES
from tests.conftest import REPO
from tests.processes import descendants_running, subreaper

AVAILABLE = [mode for mode in MODES if _works(mode)]


def test_this_machine_has_a_sandbox():
    # CI installs bubblewrap (.ci/run): the strongest mode is the one chosen.
    assert AVAILABLE, "no sandbox works here: install bubblewrap (apt-get install bubblewrap)"
    assert sandbox_mode() == AVAILABLE[0]


SENTINEL = new_sentinel()


def test_a_forced_mode_must_exist(monkeypatch):
    monkeypatch.setenv("FACTORY_SANDBOX", "chroot")
    with pytest.raises(MissingDependencyError, match="FACTORY_SANDBOX must be one of bwrap, unshare, setuid"):
        sandbox_mode()
    monkeypatch.setenv("FACTORY_SANDBOX", AVAILABLE[-1])
    assert sandbox_mode() == AVAILABLE[-1]


def test_all_164_canonical_solutions_pass():
    chosen = problems()
    assert len(chosen) == 164
    outcomes = run_programs([program(p, p["canonical_solution"], SENTINEL) for p in chosen], Limits(wall_s=20))
    failed = [(p["task_id"], o.status, o.stderr[-300:]) for p, o in zip(chosen, outcomes, strict=True)]
    assert [f for f, o in zip(failed, outcomes, strict=True) if not passed(o, SENTINEL)] == []


def test_broken_variants_fail():
    chosen = problems(12)
    broken = []
    for p in chosen:
        broken.append(program(p, "    return None\n", SENTINEL))  # no answer
        broken.append(program(p, p["canonical_solution"].replace("return ", "return not ", 1), SENTINEL))  # wrong
        # Exit status 0 from inside the function, before check() finished: only the sentinel tells.
        broken.append(program(p, "    import os\n    os._exit(0)\n", SENTINEL))
        broken.append(program(p, "    raise SystemExit(0)\n", SENTINEL))
    outcomes = run_programs(broken, Limits(wall_s=20))
    assert not [b for b, o in zip(broken, outcomes, strict=True) if passed(o, SENTINEL)]
    assert all(o.returncode == 0 for o in outcomes[2::4] + outcomes[3::4])  # "succeeded", yet failed


# Completions that attack instead of answering, each the body of HumanEval/0's function: the
# harness must report each as a failure, contain it, and carry on.
HOSTILE = {
    "infinite loop": "while True:\n    pass",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "10 GB allocation": "block = bytearray(10 * 1024**3)\nblock[-1] = 1\nreturn True",
    "kill the parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nreturn True",
}


def _completion(body: str) -> str:
    return "".join(f"    {line}\n" for line in body.splitlines())


# The chosen mode in the fast loop, the fallbacks with the slow tests (each waits out its timeouts).
@pytest.mark.parametrize(
    "mode", [pytest.param(m, marks=[pytest.mark.slow] if i else []) for i, m in enumerate(AVAILABLE)]
)
def test_hostile_programs_are_contained_and_fail(mode, tmp_path):
    outside = REPO / f"escaped-{uuid.uuid4().hex}"  # a folder of the evaluator's, writable by it
    private_tmp = Path("/tmp") / f"escaped-{uuid.uuid4().hex}"
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    bodies = {
        **HOSTILE,
        "write outside": f"open({str(outside)!r}, 'w').write('x')\nreturn True",
        "open a socket": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).send(b'hi')",
    }
    if mode == "bwrap":  # /tmp is the sandbox's own there: what it writes never reaches the host's
        bodies["write /tmp"] = f"open({str(private_tmp)!r}, 'w').write('x')\nreturn True"
    problem = problems(1)[0]
    sources = [program(problem, _completion(body), SENTINEL) for body in bodies.values()]
    started, parent = time.monotonic(), os.getppid()
    try:
        with subreaper():  # another session's sandboxed programs are not this test's leftovers
            outcomes = dict(zip(bodies, run_programs(sources, Limits(wall_s=3, cpu_s=2), mode=mode), strict=True))
            time.sleep(0.2)
            leftover = descendants_running(b"factory-sandbox-", b"program.py")
        listener.setblocking(False)
        try:
            connection, _ = listener.accept()
            connection.close()
            connected = True
        except BlockingIOError:
            connected = False
    finally:
        listener.close()
        outside.unlink(missing_ok=True)
        private_tmp.unlink(missing_ok=True)
    assert time.monotonic() - started < 30
    for name, outcome in outcomes.items():
        assert not passed(outcome, SENTINEL), f"{name}: {outcome}"
    assert outcomes["infinite loop"].status in ("timeout", "failed")
    assert "MemoryError" in outcomes["10 GB allocation"].stderr
    assert not outside.exists() and not private_tmp.exists()
    if mode != "setuid":  # setuid mode does not close the network (docs/architecture.md, "The sandbox")
        assert not connected
        assert (
            "Network is unreachable" in outcomes["open a socket"].stderr
            or "refused" in outcomes["open a socket"].stderr
        )
    assert not leftover, "a sandboxed process outlived its run"
    # This process and its parent are alive to say so (compared with the parent it had, not with
    # init's pid 1: a test run started in the background may have been orphaned before it began).
    assert os.getppid() == parent


@pytest.mark.parametrize(
    "mode", [pytest.param(m, marks=[pytest.mark.slow] if i else []) for i, m in enumerate(AVAILABLE)]
)
def test_each_way_a_program_ends_has_its_reason(mode):
    programs = {
        "exit": "print('fine')",
        "error": "print('before')\nraise ValueError('wrong answer')",
        "memory": "block = bytearray(10 * 1024**3)",
        "cpu": "while True:\n    pass",
        "signal": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
        "timeout": "import time\ntime.sleep(60)",
    }
    assert sorted(programs) == sorted(EXIT_REASONS)
    # The sleeper alone under a short wall clock; the others with room for the busy loop to spend its
    # second of CPU however loaded the machine is.
    hung = programs.pop("timeout")
    outcomes = dict(
        zip(programs, run_programs(list(programs.values()), Limits(wall_s=120, cpu_s=1), mode=mode), strict=True)
    )
    (outcomes["timeout"],) = run_programs([hung], Limits(wall_s=3), mode=mode)
    assert {name: o.exit_reason for name, o in outcomes.items()} == {name: name for name in EXIT_REASONS}
    assert outcomes["exit"].passed and outcomes["exit"].stdout == "fine\n" and outcomes["exit"].stderr == ""
    error = outcomes["error"]
    assert error.stdout == "before\n" and error.stderr.rstrip().endswith("ValueError: wrong answer")
    assert 3 <= outcomes["timeout"].duration_s < 60 and outcomes["exit"].duration_s < outcomes["cpu"].duration_s


def test_output_is_kept_bounded_and_its_end_kept():
    # 3 MB of stdout ending in two-byte characters (so the cut may fall inside one), 1 MB of stderr.
    source = (
        "import sys\nsys.stdout.write('x' * 3_000_000 + 'é' * 3000 + '\\nlast line\\n')\n"
        "sys.stderr.write('e' * 1_000_000 + '\\nthe end\\n')\n"
    )
    (loud,) = run_programs([source], Limits(wall_s=20))
    for text, size, end in (
        (loud.stdout, 3_000_000 + 6000 + 11, "é\nlast line\n"),
        (loud.stderr, 1_000_009, "e\nthe end\n"),
    ):
        assert len(text.encode("utf-8")) <= SAMPLE_OUTPUT_BYTES
        assert text.startswith("[the first ") and f"of {size:,} bytes are not kept]\n" in text and text.endswith(end)
        assert len(text.encode("utf-8")) > SAMPLE_OUTPUT_BYTES - 100  # what fits is kept
    (quiet,) = run_programs(["print('é' * 10)"], Limits(wall_s=20))
    assert quiet.stdout == "é" * 10 + "\n"


def test_programs_run_at_the_same_time():
    # Each prints when it started and ended: with two workers the two runs overlap.
    source = "import time\nprint(time.time())\ntime.sleep(1.5)\nprint(time.time())\n"
    outcomes = run_programs([source, source], Limits(wall_s=30), workers=2)
    (start_a, end_a), (start_b, end_b) = ([float(t) for t in o.stdout.split()] for o in outcomes)
    assert max(start_a, start_b) < min(end_a, end_b)


@pytest.mark.skipif(os.geteuid() != 0, reason="uids are claimed only by root")
def test_no_two_sandboxes_share_a_uid():
    with claimed_uid() as first, claimed_uid() as second:
        assert first != second and min(first, second) >= SLOT_UID_BASE
    with claimed_uid() as again:
        assert again == first  # released, and the lowest free one


def test_pass_at_k_is_human_evals_unbiased_estimator():
    # 2 problems, 4 samples each, 2 and 0 correct: pass@1 = (2/4 + 0) / 2.
    assert pass_at_k([2, 0], 4) == {1: 0.25}
    assert pass_at_k([4], 10) == {1: 0.4, 10: 1.0}
