"""Factory definitions written for tests: small, two sources, every reference resolvable."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO

DEMO_TRAIN = REPO / "configs" / "demo-train.toml"


def two_sources(folder: Path, *, extra: str = "", gate: str = "", runs: str | None = None) -> Path:
    """``folder/factory.toml``: source ``code`` (Python files under ``folder/code``, deduplicated,
    filtered, decontaminated) and source ``web`` (JSONL under ``folder/web``, filtered), a
    fixed mixture of both, a run on it and a held-out eval of each checkpoint."""
    (folder / "code").mkdir(parents=True, exist_ok=True)
    (folder / "web").mkdir(parents=True, exist_ok=True)
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

[sources.web]
format = "jsonl"
paths = ["web"]
id_field = "id"
dedup = false
filter = "docs"
watch = 2

[tokenizer]
vocab_size = 300
max_bytes = 1000000

[mixtures.both]
weights = {{ code = 0.5, web = 0.5 }}
heldout_documents = 4
{run}
{gate}
{extra}
"""
    path = folder / "factory.toml"
    path.write_text(text)
    return path


STDLIB = Path(__import__("sysconfig").get_paths()["stdlib"])


def code_files(folder: Path, first: int, count: int) -> list[str]:
    """Copy standard-library modules ``first .. first + count`` (by name) into ``folder``."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in STDLIB.glob("*.py"))[first : first + count]
    for name in names:
        shutil.copy(STDLIB / name, folder / name)
    return names


def prose() -> list[tuple[str, str]]:
    """(id, text) of the standard library's long docstrings: real English prose, most of which the
    shipped `docs` filter keeps."""
    import ast

    found = []
    for path in sorted(STDLIB.rglob("*.py")):
        if {"test", "tests", "idlelib", "site-packages"} & set(path.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in [tree, *[n for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)]]:
            text = ast.get_docstring(node)
            if text and len(text) > 1200:
                found.append((f"{path.relative_to(STDLIB)}:{getattr(node, 'name', 'module')}", text))
    return found


def web_records(folder: Path, name: str, first: int, count: int) -> None:
    """``folder/name``: JSONL records ``first .. first + count`` of ``prose()``."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": i, "text": t}) for i, t in prose()[first : first + count]]
    (folder / name).write_text("\n".join(lines) + "\n")
