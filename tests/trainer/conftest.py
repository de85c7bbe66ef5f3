"""The trainer tests' shared corpus and reference run (also used by test_multinode.py).

One session-scoped corpus (ingested through the real job, so lineage has runs to show), pinned
into a two-component manifest with a tokenizer trained on it. The runs share it.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import run_factory

STEPS = 6


@dataclass(frozen=True)
class TrainSetup:
    home: Path
    config: Path


def _jsonl(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))


@pytest.fixture(scope="session")
def setup(spark, tmp_path_factory) -> TrainSetup:
    from pyiceberg.catalog import load_catalog

    from lakehouse.catalog import embedded_catalog_properties
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from pipelines.ingest import IngestOptions, ingest
    from pipelines.ingest_records import RecordConfig
    from streaming_loader.tokenizer_train import train_tokenizer

    home = tmp_path_factory.mktemp("train-home")
    (home / "warehouse").mkdir()
    catalog = load_catalog("factory", **embedded_catalog_properties(home))
    words = "the data engine streams pinned snapshots into training while every checkpoint keeps lineage".split()
    prose = [" ".join(words[(i * 7 + k) % len(words)] for k in range(8 + i % 23)) + "." for i in range(300)]
    code = [f"def f{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(300)]
    for name, texts in (("text", prose), ("code", code)):
        corpus = home / f"{name}.jsonl"
        _jsonl(corpus, texts)
        opts = IngestOptions([str(corpus)], "jsonl", f"raw.{name}", RecordConfig(source=name), run_id=f"train-{name}")
        ingest(spark, catalog, opts)
    spec = {
        "seed": 5,
        "components": [
            {"name": "text", "table": "raw.text", "weight": 0.5, "heldout_fraction": 0.1},
            {"name": "code", "table": "raw.code", "weight": 0.5, "heldout_fraction": 0.1},
        ],
    }
    pin(catalog, spec_from_dict(spec)).save(home / "manifest.json")
    (home / "tokenizer.json").write_text(train_tokenizer(catalog, ["raw.text", "raw.code"], 300).text)
    config = home / "train.toml"
    config.write_text(
        f"""
[data]
manifest = "{home / "manifest.json"}"
tokenizer = "{home / "tokenizer.json"}"
seq_len = 32
global_batch_size = 8
backend = "local"

[model]
preset = "tiny"

[train]
steps = {STEPS}
micro_batch_size = 2

[optim]
lr = 0.01
warmup_steps = 2

[eval]
every = 3
batches = 1

[checkpoint]
every = 2
keep = 2
"""
    )
    return TrainSetup(home, config)


def losses(run_dir: Path) -> dict[int, float]:
    """Step → loss; a step logged twice (before a crash and after resume) keeps its last value."""
    found = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == "train":
            found[record["step"]] = record["loss"]
    return found


@pytest.fixture(scope="session")
def two_rank_training(setup, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The uninterrupted reference run: 2 ranks, FSDP, launched through `factory train -q --resume`
    into a new folder (it starts at step 0; what -q leaves of its output is checked in
    test_train.py); its folder and the finished process."""
    run_dir = tmp_path_factory.mktemp("runs") / "two-rank"
    proc = run_factory(
        "train", "-q", "--resume", "--config", str(setup.config), "--nproc", "2", "--set", f"run.dir='{run_dir}'",
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return run_dir, proc


@pytest.fixture(scope="session")
def two_rank_run(two_rank_training) -> Path:
    """The reference run's folder."""
    return two_rank_training[0]


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``folder`` while in the block: a disk that fills up (the test
    is skipped where mounting is refused)."""
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
