"""Two runs that reach the same source take turns: its sensor starts nothing while a run of the
source is at work, and each chain step and the gate wait for the source's lock (a refresh and the
refine started for its own new raw snapshot once ran the same gate at once, in the same sweep)."""

from __future__ import annotations

import threading
import time

import dagster as dg
import pyarrow as pa
import pytest

from orchestration.definition_load import load_definition
from orchestration.graph import build_assets, build_definitions
from orchestration.keys import production_key, step_key
from orchestration.locks import exclusive, source_lock
from orchestration.state import tagged
from tests.orchestration.definitions import code_files, two_sources

pytestmark = pytest.mark.engine  # real Dagster, a real Iceberg catalog


@pytest.fixture
def definition(tmp_path, factory_home):
    path = two_sources(tmp_path / "factory")
    code_files(path.parent / "code", 0, 2)
    return load_definition(path)


def test_a_source_sensor_starts_nothing_while_a_run_of_its_source_is_at_work(definition):
    defs = build_definitions(definition)
    sensor = next(s for s in defs.sensors if s.name == "code_sensor")
    with dg.DagsterInstance.ephemeral() as instance:

        def tick():
            return sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))

        assert [r.job_name for r in tick().run_requests] == ["code_refresh"]  # files not ingested

        def at_work(job: str, source: str) -> dg.DagsterRun:
            run = dg.DagsterRun(job_name=job, status=dg.DagsterRunStatus.STARTED, tags={"factory/source": source})
            return instance.add_run(run)

        at_work("web_refresh", "web")  # another source's run: no reason to wait
        assert [r.job_name for r in tick().run_requests] == ["code_refresh"]
        refresh = at_work("code_refresh", "code")
        result = tick()
        assert not result.run_requests and refresh.run_id in result.skip_message
        instance.report_run_failed(refresh)  # ended: the sensor looks at the tables again
        assert [r.job_name for r in tick().run_requests] == ["code_refresh"]


def in_thread(definition, key: dg.AssetKey) -> tuple[threading.Thread, list]:
    """Materialise the asset ``key`` in a thread, as a second run would; its result lands in the list."""
    (asset,) = [a for a in build_assets(definition) if key in a.keys]
    results: list = []

    def materialise() -> None:
        results.append(dg.materialize([asset], resources={"commands": None}, raise_on_error=False))

    thread = threading.Thread(target=materialise, daemon=True)
    thread.start()
    return thread, results


def test_the_gate_waits_for_the_run_at_work_on_its_source(definition, catalog):
    catalog.create_namespace("decontaminated")
    table = catalog.create_table("decontaminated.code", pa.schema([("id", pa.string())]))
    table.append(pa.table({"id": ["a"]}))
    first = table.refresh().current_snapshot().snapshot_id
    with exclusive(definition.folder(), source_lock("code")):
        thread, results = in_thread(definition, production_key("code"))
        time.sleep(3)
        assert thread.is_alive() and tagged(catalog, "decontaminated.code") is None, "the gate did not wait"
    thread.join(timeout=120)
    (result,) = results
    assert result.success and tagged(catalog, "decontaminated.code") == first  # the first snapshot: promoted


def test_a_chain_step_waits_for_the_run_at_work_on_its_source(definition):
    with exclusive(definition.folder(), source_lock("code")):
        thread, results = in_thread(definition, step_key("code", "dedup"))
        time.sleep(3)
        assert thread.is_alive(), "the step did not wait"
    thread.join(timeout=120)
    (result,) = results  # then it looks, and raw.code has no snapshot: nothing to refine
    assert not result.success
