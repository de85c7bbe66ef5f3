"""Factory definitions written for tests: small, two sources, every reference resolvable."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO

DEMO_TRAIN = REPO / "configs" / "demo-train.toml"


def two_sources(folder: Path, *, extra: str = "", gate: str = "", runs: str | None = None) -> Path:
    """``folder/factory.toml``: source ``code`` (Python files under ``folder/code``, deduplicated,
    filtered, decontaminated) and source ``notes`` (JSONL under ``folder/notes``, filtered), a
    fixed mixture of both, a run on it and a held-out eval of each checkpoint."""
    (folder / "code").mkdir(parents=True, exist_ok=True)
    (folder / "notes").mkdir(parents=True, exist_ok=True)
    run = (
        runs
        if runs is not None
        else f"""
[runs.small]
config = "{DEMO_TRAIN}"
mixture = "both"
set = ["train.steps=4", "eval.every=2", "eval.batches=1", "checkpoint.every=2", "data.global_batch_size=4",
       "data.seq_len=64", "data.num_shards=1"]

[evals.loss]
suites = ["heldout"]
cadence = "checkpoint"
"""
    )
    text = f"""
name = "team"

[sources.code]
format = "files"
paths = ["code"]
include = ["*.py"]
filter = "code"
decontaminate = ["humaneval"]
watch = 2

[sources.notes]
format = "jsonl"
paths = ["notes"]
id_field = "id"
dedup = false
filter = "docs"
watch = 2

[tokenizer]
vocab_size = 300
max_bytes = 1000000

[mixtures.both]
weights = {{ code = 0.5, notes = 0.5 }}
heldout_documents = 4
{run}
{gate}
{extra}
"""
    path = folder / "factory.toml"
    path.write_text(text)
    return path
