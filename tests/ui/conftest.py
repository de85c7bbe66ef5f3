"""Homes for the UI's tests: eval samples over hand-made checkpoint folders (cheap, per test), real
checkpoints to generate with (made once per module), and, for the browser tests, the factory the
real jobs build (once per session, shared by the browser test modules: each adds only what its
own pages show) with Chromium and a tab on the module's server (its ``base_url`` fixture)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from tests.decisions import hand_made_checkpoint, pinned_manifest
from tests.ui.browser import CHROMIUM, CHROMIUM_ARGS
from tests.ui.built_factory import BuiltFactory, build
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


@pytest.fixture(scope="session")
def factory(spark, tmp_path_factory) -> BuiltFactory:
    return build(spark, tmp_path_factory.mktemp("ui-home"))


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, base_url):
    """A fresh tab that records every console message and page error."""
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.console_messages_seen = []
    tab.on("console", lambda message: tab.console_messages_seen.append(message.text))
    tab.on("pageerror", lambda error: tab.console_messages_seen.append(f"pageerror: {error}"))
    yield tab
    context.close()


@pytest.fixture(scope="session")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("FACTORY_UI_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
