"""A real checkpoint to evaluate: a tiny model trained for 2 steps on 2 torchrun ranks (gloo, FSDP2).

The corpus is appended with pyiceberg (no Spark: the eval reads only the manifest, tokenizer and
checkpoint), pinned into a two-component manifest with held-out splits, like tests/trainer's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO


@dataclass(frozen=True)
class TrainedRun:
    home: Path  # the lakehouse the manifest was pinned in
    run_dir: Path
    checkpoint: Path  # its one complete checkpoint, saved by 2 ranks


def build_corpus_and_config(home: Path, steps: int = 2) -> Path:
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    from lakehouse.catalog import embedded_catalog_properties, ensure_table
    from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from streaming_loader.tokenizer_train import train_tokenizer

    (home / "warehouse").mkdir(parents=True, exist_ok=True)
    catalog = load_catalog("factory", **embedded_catalog_properties(home))
    words = "the data engine streams pinned snapshots into training while every checkpoint keeps lineage".split()
    prose = [" ".join(words[(i * 7 + k) % len(words)] for k in range(8 + i % 23)) + "." for i in range(200)]
    code = [f"def f{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(200)]
    for name, texts in (("text", prose), ("code", code)):
        rows = [
            {"doc_id": f"{name}-{i}", "source": name, "text": t, "path": None, "lang": None, "n_bytes": len(t)}
            for i, t in enumerate(texts)
        ]
        ensure_table(catalog, ("raw", name), DOCUMENT_SCHEMA).append(
            pa.Table.from_pylist(rows, schema=arrow_schema(DOCUMENT_SCHEMA))
        )
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
steps = {steps}

[eval]
batches = 1

[checkpoint]
keep = 1
"""
    )
    return config


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> TrainedRun:
    home = tmp_path_factory.mktemp("eval-train-home")
    config = build_corpus_and_config(home)
    run_dir = home / "runs" / "tiny"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command += ["-m", "trainer.train", "--config", str(config), "--set", f"run.dir='{run_dir}'"]
    proc = subprocess.run(
        command, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (checkpoint,) = sorted((run_dir / "checkpoints").iterdir())
    assert json.loads((checkpoint / "COMPLETE").read_text())["world_size"] == 2
    return TrainedRun(home, run_dir, checkpoint)
