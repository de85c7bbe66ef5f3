"""A step that fails marks its asset failed in Dagster with the `factory` command's own error, and
nothing downstream of it runs."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from orchestration.definition_load import load_definition
from orchestration.graph import build_definitions
from tests.orchestration.definitions import two_sources

pytestmark = pytest.mark.engine  # real Dagster, `factory` subprocesses


def test_a_failed_ingest_fails_its_asset_with_the_commands_error_and_runs_nothing_after_it(factory_home, tmp_path):
    folder = tmp_path / "factory"
    path = two_sources(folder)
    (folder / "web" / "part-0.jsonl").write_text(json.dumps({"text": "no id field here"}) + "\n")
    definition = load_definition(path)
    defs = build_definitions(definition)
    web = dg.AssetSelection.assets(dg.AssetKey(["web", "raw"])).downstream()
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize(
            list(defs.assets), instance=instance, resources=defs.resources, selection=web, raise_on_error=False
        )
    assert not result.success
    (failure,) = result.get_step_failure_events()
    assert failure.step_key == "web__raw"
    error, text = failure.step_failure_data.error, []
    while error is not None:
        text.append(error.message)
        error = error.cause
    assert "factory ingest exited with 2: error:" in "\n".join(text) and "id" in "\n".join(text)
    assert not result.get_asset_materialization_events()  # filtered, production, mixture, run: none ran
    started = {e.step_key for e in result.all_events if e.event_type_value == "STEP_START"}
    assert started == {"web__raw"}
