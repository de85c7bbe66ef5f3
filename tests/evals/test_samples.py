"""``evals.samples`` on a real checkpoint (2 torchrun ranks, a real SQLite catalog): every sample is
kept once, with its results; its seed reproduces its completion; the sandbox's output is stored
bounded and a hung program's timeout recorded; the likelihood suites' figures are those of an
independent computation."""

from __future__ import annotations

import hashlib
import json
import math
import shutil

import pytest
import torch

from evals.checkpoint_model import load_checkpoint
from evals.generate import generate
from evals.registry import SuiteOptions
from evals.results import RESULTS_TABLE, SAMPLES_TABLE, checkpoint_results
from evals.run import evaluate_checkpoint
from evals.samples import checkpoint_samples, eval_runs
from evals.suites import humaneval
from lakehouse.commit import summary_properties
from lakehouse.schemas import EVAL_SAMPLES_SCHEMA, SAMPLE_OUTPUT_BYTES
from streaming_loader.loader import IGNORE_INDEX
from tests.conftest import run_factory
from tests.evals.reference import reference_bits
from tests.other_engines import assert_daft_reads_as_pyiceberg
from trainer.data import build_eval_loader
from trainer.parallel import World

pytestmark = [pytest.mark.engine, pytest.mark.slow]  # the fixture trains under torchrun

CPU = torch.device("cpu")
SAMPLED = SuiteOptions(samples=2, temperature=1.0, limit=2, max_new_tokens=12)


def _snapshots(catalog, identifier) -> list[int]:
    return [s.snapshot_id for s in catalog.load_table(identifier).snapshots()]


def test_every_sample_is_kept_once_beside_its_results(trained_run, catalog):
    suites = ["heldout", "humaneval", "humaneval_bpb"]
    outcomes = {o.suite: o for o in evaluate_checkpoint(catalog, trained_run.checkpoint, suites, SAMPLED)}
    table = catalog.load_table(SAMPLES_TABLE)
    data = table.scan().to_arrow()
    assert data.column_names == [f.name for f in EVAL_SAMPLES_SCHEMA.fields]
    rows = checkpoint_samples(catalog, str(trained_run.checkpoint))
    assert [(r["suite"], r["task_id"], r["sample_index"]) for r in rows] == [
        ("humaneval", "HumanEval/0", 0),
        ("humaneval", "HumanEval/0", 1),
        ("humaneval", "HumanEval/1", 0),
        ("humaneval", "HumanEval/1", 1),
        ("humaneval_bpb", "HumanEval/0", 0),
        ("humaneval_bpb", "HumanEval/1", 0),
    ]
    problems = {p["task_id"]: p for p in humaneval.problems(2)}
    for row in rows:
        outcome = outcomes[row["suite"]]
        assert row["eval_run_id"] == outcome.eval_run_id
        key = json.dumps([outcome.eval_run_id, row["task_id"], row["sample_index"]])
        assert row["sample_id"] == hashlib.sha256(key.encode()).hexdigest()[:32]
        assert (row["run_id"], row["checkpoint"], row["step"]) == (
            str(trained_run.run_dir),
            str(trained_run.checkpoint),
            2,
        )
        assert row["prompt"] == problems[row["task_id"]]["prompt"] and "def check(" in row["test"]
    judged = [r for r in rows if r["suite"] == "humaneval"]
    assert all(r["passed"] is False and r["exit_reason"] in ("error", "exit") and r["score"] is None for r in judged)
    assert all((r["temperature"], r["top_p"], r["max_new_tokens"]) == (1.0, 1.0, 12) for r in judged)
    scored = [r for r in rows if r["suite"] == "humaneval_bpb"]
    assert all(r["passed"] is None and r["exit_reason"] is None and r["score"] > 0 for r in scored)
    assert [r["completion"] for r in scored] == [problems[r["task_id"]]["canonical_solution"] for r in scored]

    # One commit per table per eval run, the samples' bound like the results'; heldout keeps none.
    for suite in ("humaneval", "humaneval_bpb"):
        summary = summary_properties(table.snapshot_by_id(outcomes[suite].samples_snapshot_id))
        assert summary["factory.run-id"] == outcomes[suite].eval_run_id and summary["factory.job"] == "eval"
    assert outcomes["heldout"].samples_snapshot_id is None
    found = {r["suite"]: r for r in eval_runs(catalog, str(trained_run.checkpoint))}
    assert found["heldout"]["samples_snapshot"] is None and found["heldout"]["samples"] == 0
    assert found["humaneval"]["samples_snapshot"] == outcomes["humaneval"].samples_snapshot_id
    assert found["humaneval"]["samples"] == 4 and found["humaneval"]["passed"] == 0
    assert found["humaneval_bpb"]["results_snapshot"] == outcomes["humaneval_bpb"].snapshot_id
    assert_daft_reads_as_pyiceberg(table)

    before = (_snapshots(catalog, SAMPLES_TABLE), _snapshots(catalog, RESULTS_TABLE))
    again = evaluate_checkpoint(catalog, trained_run.checkpoint, suites, SAMPLED)
    assert all(o.already_committed for o in again)
    assert (_snapshots(catalog, SAMPLES_TABLE), _snapshots(catalog, RESULTS_TABLE)) == before
    assert catalog.load_table(SAMPLES_TABLE).scan().to_arrow().num_rows == 6


def test_a_rows_seed_reproduces_its_completion(trained_run, catalog):
    evaluate_checkpoint(catalog, trained_run.checkpoint, ["humaneval"], SAMPLED)
    rows = checkpoint_samples(catalog, str(trained_run.checkpoint), "humaneval")
    loaded = load_checkpoint(trained_run.checkpoint, CPU)
    for row in rows:
        (again,) = generate(
            loaded.model,
            loaded.tokenizer,
            [row["prompt"]],
            samples=1,
            max_new_tokens=row["max_new_tokens"],
            device=CPU,
            temperature=row["temperature"],
            top_p=row["top_p"],
            seeds=row["seed"],
            stop=humaneval.STOP,
        )
        assert again == [row["completion"]], row["sample_id"]
    # Sampled at temperature 1 from a near-uniform model: each sample's own seed draws its own completion.
    assert len({r["completion"] for r in rows}) == len(rows)


def test_likelihood_figures_are_the_independent_computations(trained_run, catalog):
    outcomes = evaluate_checkpoint(catalog, trained_run.checkpoint, ["humaneval_bpb", "heldout"], SAMPLED)
    metrics = {(o.suite, m.name): m for o in outcomes for m in o.metrics}
    loaded = load_checkpoint(trained_run.checkpoint, CPU)
    encoder, eod = loaded.tokenizer.load(), loaded.tokenizer.eod_id
    bits = nbytes = 0
    rows = checkpoint_samples(catalog, str(trained_run.checkpoint), "humaneval_bpb")
    for problem, row in zip(humaneval.problems(2), rows, strict=True):
        prompt, solution = problem["prompt"], problem["canonical_solution"]
        encoding = encoder.encode(prompt + solution, add_special_tokens=False)
        first = next(i for i, (_, end) in enumerate(encoding.offsets) if end > len(prompt))
        problem_bits = reference_bits(loaded.model, [eod, *encoding.ids], first + 1)
        problem_bytes = len((prompt + solution)[encoding.offsets[first][0] :].encode())
        assert row["score"] == pytest.approx(problem_bits / problem_bytes, rel=1e-6)
        bits, nbytes = bits + problem_bits, nbytes + problem_bytes
    assert metrics["humaneval_bpb", "bpb"].value == pytest.approx(bits / nbytes, rel=1e-6)
    assert metrics["humaneval_bpb", "bpb"].samples == nbytes

    # Held-out: the bytes of the scored tokens, counted here by decoding each row's labels (the
    # corpus is ASCII, so characters are bytes), the end-of-document tokens holding none.
    world = World(rank=0, size=1, local_rank=0, device=CPU, mesh=None)
    counted: dict[str, int] = {}
    loader = build_eval_loader(loaded.config, world)
    try:
        for _, batch in zip(range(loaded.config.eval.batches), loader, strict=False):
            for labels, component in zip(batch["labels"], batch["components"], strict=True):
                ids = [i for i in labels.tolist() if i != IGNORE_INDEX and i != eod]
                counted[loader.components[component]] = counted.get(loader.components[component], 0) + len(
                    encoder.decode(ids)
                )
    finally:
        loader.close()
    for name, count in counted.items():
        loss, bpb = metrics["heldout", f"loss/{name}"], metrics["heldout", f"bpb/{name}"]
        assert bpb.samples == count
        assert bpb.value == pytest.approx(loss.value * loss.samples / math.log(2) / count, rel=1e-9)
    results = checkpoint_results(catalog, str(trained_run.checkpoint))
    assert {r["metric"] for r in results if r["suite"] == "heldout"} == {
        f"{k}/{n}" for k in ("loss", "bpb") for n in counted
    }


def test_noisy_and_hung_programs_are_stored_bounded(trained_run, catalog, monkeypatch):
    completions = {
        "HumanEval/0": "    print('x' * 3_000_000)\n    return 'é' * 5000\n",  # megabytes of output, then wrong
        "HumanEval/1": "    import time\n    time.sleep(60)\n",  # hangs
    }
    by_prompt = {p["prompt"]: p["task_id"] for p in humaneval.problems(2)}
    monkeypatch.setattr(
        humaneval, "generate", lambda model, tokenizer, prompts, **_: [[completions[by_prompt[p]]] for p in prompts]
    )
    options = SuiteOptions(limit=2, timeout_s=3)
    (outcome,) = evaluate_checkpoint(catalog, trained_run.checkpoint, ["humaneval"], options)
    noisy, hung = checkpoint_samples(catalog, str(trained_run.checkpoint), "humaneval")
    assert noisy["passed"] is False and noisy["exit_reason"] == "error"
    for text in (noisy["stdout"], noisy["stderr"]):
        assert len(text.encode("utf-8")) <= SAMPLE_OUTPUT_BYTES
    assert noisy["stdout"].startswith("[the first ") and noisy["stdout"].endswith("x" * 100 + "\n")
    assert "AssertionError" in noisy["stderr"]
    assert hung["passed"] is False and hung["exit_reason"] == "timeout" and 3 <= hung["duration_s"] < 30
    before = _snapshots(catalog, SAMPLES_TABLE)
    (again,) = evaluate_checkpoint(catalog, trained_run.checkpoint, ["humaneval"], options)
    assert again.already_committed and again.eval_run_id == outcome.eval_run_id
    assert _snapshots(catalog, SAMPLES_TABLE) == before


def test_a_crash_between_the_two_commits_is_finished_by_a_retry(trained_run, factory_home):
    from lakehouse.catalog import load_catalog

    args = ("eval", str(trained_run.checkpoint), "--suite", "humaneval_bpb", "--limit", "2")
    killed = run_factory(*args, env={"FACTORY_FAIL_AT": "between-commits"})
    assert killed.returncode != 0
    catalog = load_catalog()
    assert catalog.load_table(SAMPLES_TABLE).scan().to_arrow().num_rows == 2  # the samples went first
    assert checkpoint_results(catalog, str(trained_run.checkpoint)) == []  # no results without their samples
    samples_snapshots = _snapshots(catalog, SAMPLES_TABLE)

    retried = run_factory(*args)
    assert retried.returncode == 0, retried.stderr[-3000:]
    assert "humaneval_bpb: eval run eval-humaneval_bpb-" in retried.stdout and "2 sample(s)" in retried.stdout
    catalog = load_catalog()
    assert _snapshots(catalog, SAMPLES_TABLE) == samples_snapshots  # finished, not repeated
    assert {r["metric"] for r in checkpoint_results(catalog, str(trained_run.checkpoint))} == {"bpb", "problems"}

    lineage = run_factory("lineage", str(trained_run.checkpoint))
    assert lineage.returncode == 0, lineage.stderr[-3000:]
    assert f"evals.samples@{samples_snapshots[0]}" in lineage.stdout and "2 sample(s)" in lineage.stdout


def test_the_lineage_graph_counts_a_checkpoints_samples(trained_run, tmp_path, monkeypatch):
    from lakehouse.catalog import load_catalog
    from ui.graph import snapshot_graph
    from ui.sources import Sources

    # A copy of the trained run's lakehouse (its tables' files stay where they are), so that the
    # session's own catalog gets no eval tables.
    home = tmp_path / "home"
    (home / "warehouse").mkdir(parents=True)
    shutil.copy(trained_run.home / "catalog.db", home / "catalog.db")
    shutil.copy(trained_run.home / "manifest.json", home / "manifest.json")
    shutil.copytree(trained_run.run_dir, home / "runs" / trained_run.run_dir.name)
    monkeypatch.setenv("FACTORY_HOME", str(home))
    monkeypatch.delenv("FACTORY_CATALOG", raising=False)
    catalog = load_catalog()
    snapshot_id = catalog.load_table(("raw", "code")).current_snapshot().snapshot_id

    def eval_node():
        graph = snapshot_graph(Sources(None, [home]), "raw.code", snapshot_id)
        return next(n for n in graph.nodes.values() if n.stage == "eval")

    evaluate_checkpoint(catalog, trained_run.checkpoint, ["heldout"], SAMPLED)
    assert eval_node().label == "4 eval result(s)"  # heldout keeps no samples
    evaluate_checkpoint(catalog, trained_run.checkpoint, ["humaneval_bpb"], SAMPLED)
    node = eval_node()
    assert node.label == "6 results, 2 samples" and node.detail == "heldout, humaneval_bpb"
