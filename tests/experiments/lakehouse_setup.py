"""A tiny lakehouse for experiment tests: three document tables committed by the commit protocol
(no Spark: pyarrow files, the same commit as the jobs), a tokenizer trained on them, a
three-component manifest and a training config of a few steps of a very small model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pipelines.dedup_corpus import write_table

COMPONENTS = ("text", "code", "num")
STEPS = 3


@dataclass(frozen=True)
class Lakehouse:
    home: Path
    manifest: Path
    config: Path


def texts(name: str, n: int = 160) -> list[str]:
    words = "the data engine streams pinned snapshots into training while every checkpoint keeps lineage".split()
    if name == "text":
        return [" ".join(words[(i * 7 + k) % len(words)] for k in range(8 + i % 23)) + "." for i in range(n)]
    if name == "code":
        return [f"def f{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(n)]
    return [" ".join(str((i * k) % 97) for k in range(20)) for i in range(n)]


def make_lakehouse(home: Path) -> Lakehouse:
    from lakehouse.catalog import load_catalog
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from streaming_loader.tokenizer_train import train_tokenizer

    catalog = load_catalog()  # $FACTORY_HOME: the caller points it at `home`
    for name in COMPONENTS:
        docs = [{"doc_id": f"{name}-{i}", "source": name, "text": t} for i, t in enumerate(texts(name))]
        write_table(catalog, f"raw.{name}", docs, run_id=f"fixture-{name}")
    spec = {
        "name": "three",
        "seed": 5,
        "components": [{"name": n, "table": f"raw.{n}", "weight": 1.0, "heldout_fraction": 0.1} for n in COMPONENTS],
    }
    pin(catalog, spec_from_dict(spec)).save(home / "manifest.json")
    (home / "tokenizer.json").write_text(train_tokenizer(catalog, [f"raw.{n}" for n in COMPONENTS], 300).text)
    config = home / "train.toml"
    config.write_text(
        f"""
[data]
manifest = "{home / "manifest.json"}"
tokenizer = "{home / "tokenizer.json"}"
seq_len = 32
global_batch_size = 8
num_shards = 2

[model]
preset = "tiny"
dim = 32

[train]
steps = {STEPS}

[optim]
lr = 0.01
warmup_steps = 1

[eval]
batches = 1

[mlflow]
enabled = true  # tracked although the suite sets FACTORY_MLFLOW=off: the sweeps read their runs back
"""
    )
    return Lakehouse(home, home / "manifest.json", config)


def lake_fixture(folder: str):
    """A module-scoped fixture: the tiny lakehouse, made once in its own ``$FACTORY_HOME``."""

    @pytest.fixture(scope="module")
    def lake(tmp_path_factory) -> Lakehouse:
        home = tmp_path_factory.mktemp(folder)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("FACTORY_HOME", str(home))
            patch.delenv("FACTORY_CATALOG", raising=False)
            yield make_lakehouse(home)

    return lake


def enter_lake(lake: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> Lakehouse:
    """Point this test (and the processes it starts) at ``lake``'s ``$FACTORY_HOME``."""
    monkeypatch.setenv("FACTORY_HOME", str(lake.home))
    monkeypatch.delenv("FACTORY_CATALOG", raising=False)
    return lake
