"""Homes for the inspection pages' tests: eval samples over hand-made checkpoint folders (cheap, per
test), and real checkpoints to generate with (made once per module)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from tests.decisions import hand_made_checkpoint, pinned_manifest
from tests.ui.inspected import make_checkpoints, sample_rows, write_samples


@dataclass(frozen=True)
class SamplesHome:
    checkpoints: list[Path]  # runs/tiny steps 1 and 2: lineage only, no weights
    rows: list[dict]  # in evals.samples


@dataclass(frozen=True)
class MadeHome:
    home: Path
    catalog: Catalog
    manifest: Path
    tokenizer: Path
    tiny: list[Path]
    markup: list[Path]


@pytest.fixture
def samples_home(catalog, factory_home) -> SamplesHome:
    manifest = factory_home / "mixtures" / "manifest.json"
    pinned_manifest(catalog, manifest)
    checkpoints = [hand_made_checkpoint(factory_home / "runs" / "tiny", manifest, step) for step in (1, 2)]
    rows = sample_rows(checkpoints)
    write_samples(catalog, rows)
    return SamplesHome(checkpoints, rows)


@pytest.fixture(scope="module")
def made_home(tmp_path_factory) -> MadeHome:
    from lakehouse.catalog import load_catalog
    from streaming_loader.tokenizer_train import train_tokenizer

    home = tmp_path_factory.mktemp("made-home")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FACTORY_HOME", str(home))
        env.delenv("FACTORY_CATALOG", raising=False)
        catalog = load_catalog()
        manifest = home / "mixtures" / "manifest.json"
        pinned_manifest(catalog, manifest)
        tokenizer = home / "tokenizer.json"
        tokenizer.write_text(train_tokenizer(catalog, ["filtered.text", "decontaminated.code"], 300).text)
        tiny, markup = make_checkpoints(home / "runs", manifest, tokenizer)
        write_samples(catalog, sample_rows(tiny))
        yield MadeHome(home, catalog, manifest, tokenizer, tiny, markup)
