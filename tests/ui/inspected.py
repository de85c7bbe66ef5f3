"""What the inspection pages' tests look at: real checkpoints made without training
(``made_checkpoints.py``) and rows of ``evals.samples`` written through the commit protocol,
some holding markup where a model's output or a program's output would be."""

from __future__ import annotations

import hashlib
from pathlib import Path

from lakehouse.commit import Run
from lakehouse.rows import commit_rows
from lakehouse.schemas import EVAL_SAMPLES_SCHEMA
from streaming_loader.tokenize import load_tokenizer_spec
from tests.ui.made_checkpoints import save_checkpoint, seeded_model, writing_model

XSS = '<script>window.__xss = 1</script><b>bold</b><img src=x onerror="window.__xss = 2">'
# What the markup checkpoints write after MARKUP_PROMPT, greedily: each text's tokens are distinct.
MARKUP_PROMPT = "<script>alert(1)</script> and <b>bold</b>. Say:"
MARKUP_TEXTS = ("<script>", "<b>hi")
SUITE = "humaneval"


def make_checkpoints(root: Path, manifest: Path, tokenizer: Path) -> tuple[list[Path], list[Path]]:
    """runs/tiny steps 1 and 2 (seeded random weights) and the markup checkpoints (``make_markup``)."""
    spec = load_tokenizer_spec(tokenizer)
    tiny = [save_checkpoint(root / "tiny", s, seeded_model(spec, s), manifest, tokenizer) for s in (1, 2)]
    return tiny, make_markup(root, manifest, tokenizer)


def make_markup(root: Path, manifest: Path, tokenizer: Path) -> list[Path]:
    """runs/markup steps 1 and 2, writing MARKUP_TEXTS after MARKUP_PROMPT."""
    spec = load_tokenizer_spec(tokenizer)
    return [
        save_checkpoint(root / "markup", s, writing_model(spec, MARKUP_PROMPT, text), manifest, tokenizer)
        for s, text in zip((1, 2), MARKUP_TEXTS, strict=True)
    ]


def sample_id(eval_run_id: str, task_id: str, index: int) -> str:
    return hashlib.sha256(f"{eval_run_id}\0{task_id}\0{index}".encode()).hexdigest()[:32]


# Verdicts by task at the two checkpoints (a list: one per sample; None: no samples there).
VERDICTS = {
    "HumanEval/0": ([False], [True]),  # fail → pass
    "HumanEval/1": ([True], [False]),  # pass → fail
    "HumanEval/2": ([True, False], [True, True]),  # passes at both (any sample)
    "HumanEval/3": ([False], None),  # only at the first
    "HumanEval/10": ([False, False], [False, True]),  # fail → pass, after HumanEval/2 in task order
}


def sample_rows(checkpoints: list[Path]) -> list[dict]:
    rows = []
    for position, checkpoint in enumerate(checkpoints):
        eval_run_id = f"ev-{position}"
        for task_id, verdicts in VERDICTS.items():
            for index, passed in enumerate(verdicts[position] or []):
                marked = task_id == "HumanEval/0"
                rows.append(
                    {
                        "sample_id": sample_id(eval_run_id, task_id, index),
                        "eval_run_id": eval_run_id,
                        "run_id": str(checkpoint.parent.parent),
                        "checkpoint": str(checkpoint),
                        "step": int(checkpoint.name[5:]),
                        "suite": SUITE,
                        "task_id": task_id,
                        "sample_index": index,
                        "prompt": f"def task_{task_id[10:]}():\n    {XSS if marked else 'pass'}\n",
                        "completion": f"{XSS} step {checkpoint.name} sample {index}" if marked else f"return {index}",
                        "test": f"assert task() == {index}",
                        "passed": passed,
                        "exit_reason": "exit" if passed else "error",
                        "stdout": XSS if marked else "",
                        "stderr": "" if passed else "AssertionError",
                        "duration_s": 0.25,
                        "score": None,
                        "temperature": 0.0,
                        "top_p": 1.0,
                        "max_new_tokens": 64,
                        "seed": 7,
                        "code_version": "test",
                    }
                )
    return rows


def write_samples(catalog, rows: list[dict], run_id: str = "samples-1") -> None:
    """``rows`` committed to ``evals.samples`` as the evals will write them: one snapshot per run."""
    run = Run(job="eval", run_id=run_id, params={}, inputs=[])
    assert commit_rows(catalog, ("evals", "samples"), EVAL_SAMPLES_SCHEMA, run, rows) is not None
