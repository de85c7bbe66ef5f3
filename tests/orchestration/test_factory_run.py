"""`factory run` over a two-source definition, in process, on real Spark, Iceberg, Ray Tune and
torchrun: everything once, then again as a no-op, then a planted candidate that is clearly worse
(half its documents replaced with noise), which the refinement gate refuses after a paired
ablation, so training keeps reading the old snapshot."""

from __future__ import annotations

import random
import string

import pyarrow as pa
import pytest

from evals.results import checkpoint_results
from factory_cli.run import materialise
from lakehouse.decisions import read_decisions
from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema
from orchestration.definition import load_definition
from orchestration.layout import mixture_folder, read_current, run_folder
from orchestration.state import PRODUCTION, head, tagged
from tests.orchestration.definitions import DEMO_TRAIN, code_files, two_sources, web_records
from trainer.checkpoint import complete_checkpoints

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PROXY = ["train.steps=8", "eval.every=8", "eval.batches=1", "checkpoint.every=8", "data.global_batch_size=4",
         "data.seq_len=64", "data.num_shards=1", "optim.warmup_steps=2"]  # fmt: skip
GATE = f"""
[policies.refinement_gate]
enabled = true
config = "{DEMO_TRAIN}"
set = {PROXY!r}
seeds = 3
""".replace("'", '"')


def snapshots(catalog) -> dict[str, int]:
    return {
        ".".join(i): len(list(catalog.load_table(i).snapshots()))
        for ns in catalog.list_namespaces()
        for i in catalog.list_tables(ns)
    }


def noisy(catalog, table: str) -> None:
    """Replace main of ``table`` with its documents, every second one's text turned to noise."""
    loaded = catalog.load_table(tuple(table.split(".")))
    rows = sorted(loaded.scan().to_arrow().to_pylist(), key=lambda r: r["doc_id"])
    rng = random.Random(0)
    for row in rows[::2]:
        row["text"] = "".join(rng.choice(string.ascii_lowercase + "  ") for _ in row["text"])
        row["n_bytes"] = len(row["text"])
    loaded.overwrite(pa.Table.from_pylist(rows, schema=arrow_schema(DOCUMENT_SCHEMA)))


def test_a_factory_runs_once_then_is_a_no_op_and_its_gate_refuses_a_worse_snapshot(
    spark, catalog, factory_home, tmp_path
):
    folder = tmp_path / "factory"
    code_files(folder / "code", 0, 20)
    web_records(folder / "web", "part-0.jsonl", 0, 40)
    definition = load_definition(two_sources(folder, gate=GATE))

    materialise(definition)

    decisions = read_decisions(catalog, factory="team")
    assert sorted((d["subject"], d["verdict"]) for d in decisions) == [("code", "promoted"), ("web", "promoted")]
    assert all("first snapshot" in d["reason"] for d in decisions)
    for source, table in (("code", "decontaminated.code"), ("web", "filtered.web")):
        assert tagged(catalog, table) == head(catalog, table) is not None, source
    mixture = read_current(mixture_folder(definition, "both"))
    assert mixture["components"] == {
        "code": f"decontaminated.code@{tagged(catalog, 'decontaminated.code')}",
        "web": f"filtered.web@{tagged(catalog, 'filtered.web')}",
    }
    run = read_current(run_folder(definition, "small"))
    steps = [step for step, _ in complete_checkpoints(__import__("pathlib").Path(run["run_dir"]))]
    assert steps == [2, 4]
    for step in steps:
        rows = checkpoint_results(catalog, f"{run['run_dir']}/checkpoints/step-{step}")
        assert sorted(r["metric"] for r in rows) == ["loss/code", "loss/web"]

    before = snapshots(catalog)
    materialise(definition)  # nothing new: every step finds its inputs taken in
    assert snapshots(catalog) == before
    assert read_current(run_folder(definition, "small")) == run

    production = tagged(catalog, "filtered.web")
    noisy(catalog, "filtered.web")
    candidate = head(catalog, "filtered.web")
    materialise(definition)

    (refusal,) = [d for d in read_decisions(catalog, factory="team") if d["verdict"] == "refused"]
    assert refusal["subject"] == "web" and refusal["inputs"]["candidate"] == candidate
    evidence = refusal["evidence"]
    assert evidence["difference"] > 0 and evidence["p_value"] < 0.05 and len(evidence["candidate"]) == 3
    assert evidence["interval"][0] > 0  # the whole interval says worse
    assert "worse beyond seed noise" in refusal["reason"]
    assert tagged(catalog, "filtered.web", PRODUCTION) == production  # training keeps the old snapshot
    assert read_current(mixture_folder(definition, "both"))["components"]["web"] == f"filtered.web@{production}"
    assert read_current(run_folder(definition, "small"))["run_dir"] == run["run_dir"]
