"""``factory eval`` on a real checkpoint saved by 2 torchrun ranks, loaded in one process, with its
metrics committed to ``evals.results`` in a real SQLite catalog."""

from __future__ import annotations

import json
import math
import pickle
import shutil

import pytest
import torch

from evals.checkpoint_model import load_checkpoint
from evals.generate import complete_by_recomputing, generate
from evals.registry import SuiteOptions
from evals.results import RESULTS_TABLE
from evals.run import evaluate_checkpoint
from evals.suites.humaneval import STOP, problems
from factory_cli.main import main
from lakehouse.commit import summary_properties
from lakehouse.errors import CheckpointError, InputError, RunConflictError
from lakehouse.version import code_version
from tests.conftest import run_factory
from tests.other_engines import assert_daft_reads_as_pyiceberg
from trainer import checkpoint as trainer_checkpoint
from trainer.model import Transformer
from trainer.parallel import World
from trainer.train import evaluate

pytestmark = [pytest.mark.engine, pytest.mark.slow]  # the fixture trains under torchrun

COLUMNS = [
    "run_id", "checkpoint", "step", "manifest_fingerprint", "snapshot_ids", "suite", "metric", "value", "samples",
    "code_version", "eval_run_id",
]  # fmt: skip
SMALL = SuiteOptions(limit=2, max_new_tokens=8)


def _snapshots(catalog) -> list[int]:
    return [s.snapshot_id for s in catalog.load_table(RESULTS_TABLE).snapshots()]


def test_each_suite_commits_its_rows_once(trained_run, catalog):
    outcomes = evaluate_checkpoint(catalog, trained_run.checkpoint, ["heldout", "humaneval"], SMALL)
    assert [(o.suite, o.already_committed) for o in outcomes] == [("heldout", False), ("humaneval", False)]
    table = catalog.load_table(RESULTS_TABLE)
    rows = table.scan().to_arrow()
    assert rows.column_names == COLUMNS
    lineage = json.loads((trained_run.checkpoint / "lineage.json").read_text())
    by_metric = {r["metric"]: r for r in rows.to_pylist()}
    assert sorted(by_metric) == ["bpb/code", "bpb/text", "loss/code", "loss/text", "pass@1", "problems"]
    for row in by_metric.values():
        assert row["run_id"] == str(trained_run.run_dir) and row["checkpoint"] == str(trained_run.checkpoint)
        assert row["step"] == 2 and row["manifest_fingerprint"] == lineage["manifest"]["fingerprint"]
        assert json.loads(row["snapshot_ids"]) == {c["table"]: c["snapshot_id"] for c in lineage["components"]}
        assert row["code_version"] == code_version()
    # A barely trained model: about the uniform loss over its 300-token vocabulary.
    for name in ("loss/code", "loss/text"):
        assert 0.5 * math.log(300) < by_metric[name]["value"] < 2 * math.log(300) and by_metric[name]["samples"] > 0
    assert 0.0 <= by_metric["pass@1"]["value"] <= 1.0 and by_metric["pass@1"]["samples"] == 1
    assert by_metric["problems"]["value"] == 2.0
    heldout, humaneval = outcomes
    assert {r["eval_run_id"] for r in by_metric.values() if r["suite"] == "heldout"} == {heldout.eval_run_id}
    summary = summary_properties(table.snapshot_by_id(humaneval.snapshot_id))
    assert summary["factory.job"] == "eval" and summary["factory.run-id"] == humaneval.eval_run_id
    assert json.loads(summary["factory.params"])["limit"] == 2
    assert_daft_reads_as_pyiceberg(table)

    before = _snapshots(catalog)
    # Again, naming the run folder (its newest checkpoint): nothing is run or committed.
    again = evaluate_checkpoint(catalog, trained_run.run_dir, ["humaneval", "heldout"], SMALL)
    assert all(o.already_committed for o in again) and _snapshots(catalog) == before
    assert {o.eval_run_id for o in again} == {heldout.eval_run_id, humaneval.eval_run_id}


def test_a_copied_or_moved_run_is_evaluated_where_it_now_is(trained_run, catalog, tmp_path):
    """A copy holds the same bytes, so the same identity and run id: its evaluation, bound to the
    original's path, was refused as "committed with other inputs", and "(or none)" of --run-id could
    not be followed."""
    (original,) = evaluate_checkpoint(catalog, trained_run.checkpoint, ["heldout"], SMALL)
    copy = tmp_path / "copy"
    shutil.copytree(trained_run.run_dir, copy)
    (copied,) = evaluate_checkpoint(catalog, copy, ["heldout"], SMALL)
    moved = copy.rename(tmp_path / "moved")
    (again,) = evaluate_checkpoint(catalog, moved, ["heldout"], SMALL)
    assert not copied.already_committed and not again.already_committed
    assert len({original.eval_run_id, copied.eval_run_id, again.eval_run_id}) == 3
    checkpoints = {r["checkpoint"] for r in catalog.load_table(RESULTS_TABLE).scan().to_arrow().to_pylist()}
    assert checkpoints == {str(trained_run.checkpoint), str(copy / "checkpoints" / trained_run.checkpoint.name),
                           str(moved / "checkpoints" / trained_run.checkpoint.name)}  # fmt: skip
    (unmoved,) = evaluate_checkpoint(catalog, trained_run.checkpoint, ["heldout"], SMALL)
    assert unmoved.already_committed and unmoved.eval_run_id == original.eval_run_id


def test_a_run_id_is_bound_to_its_suite_options(trained_run, catalog):
    options = SuiteOptions(limit=1, max_new_tokens=4)
    (first,) = evaluate_checkpoint(catalog, trained_run.checkpoint, ["humaneval"], options, run_id="dagster-7")
    assert first.eval_run_id == "dagster-7-humaneval" and not first.already_committed
    before = _snapshots(catalog)
    with pytest.raises(RunConflictError, match=r"params\.limit: committed with 1, now 3"):
        evaluate_checkpoint(catalog, trained_run.checkpoint, ["humaneval"], SuiteOptions(limit=3), run_id="dagster-7")
    assert _snapshots(catalog) == before
    (retry,) = evaluate_checkpoint(catalog, trained_run.checkpoint, ["humaneval"], options, run_id="dagster-7")
    assert retry.already_committed and _snapshots(catalog) == before


def test_the_model_loads_as_the_trainers_own_resume_does(trained_run):
    """Loading only the model from a 2-rank checkpoint into one plain process gives the weights
    (and held-out losses) that the trainer's full resume path restores."""
    loaded = load_checkpoint(trained_run.checkpoint, torch.device("cpu"))
    model = Transformer(loaded.config.model)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    world = World(rank=0, size=1, local_rank=0, device=torch.device("cpu"), mesh=None)
    trainer_checkpoint.load(trained_run.checkpoint, model, optimizer, scheduler, world)
    for (name, ours), theirs in zip(loaded.model.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs), name
    assert evaluate(loaded.model, loaded.config, world) == evaluate(model, loaded.config, world)


class _CreatesMarker:
    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_crafted_checkpoint_is_refused_without_running_it(trained_run, tmp_path):
    crafted = tmp_path / "run" / "checkpoints" / "step-2"
    shutil.copytree(trained_run.checkpoint, crafted)
    marker = tmp_path / "ran"
    (crafted / ".metadata").write_bytes(pickle.dumps(_CreatesMarker(marker)))
    with pytest.raises(CheckpointError, match="refused without running it"):
        load_checkpoint(crafted, torch.device("cpu"))
    assert not marker.exists()


def test_a_partial_checkpoint_is_refused(trained_run, tmp_path, catalog):
    partial = tmp_path / "run" / "checkpoints" / "step-2"
    shutil.copytree(trained_run.checkpoint, partial)
    (partial / "COMPLETE").unlink()  # a save that was interrupted
    with pytest.raises(InputError, match="incomplete checkpoint"):
        evaluate_checkpoint(catalog, partial, ["heldout"], SMALL)
    assert not catalog.table_exists(RESULTS_TABLE)


def test_factory_eval_then_lineage_shows_the_results(trained_run, factory_home, capsys):
    proc = run_factory("eval", str(trained_run.checkpoint), "--suite", "heldout")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "heldout: eval run eval-heldout-" in proc.stdout and "loss/code" in proc.stdout
    proc = run_factory("lineage", str(trained_run.run_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "evals (evals.results):" in proc.stdout and "loss/text" in proc.stdout
    capsys.readouterr()
    assert main(["lineage", str(trained_run.checkpoint), "--json"]) == 0
    assert {r["metric"] for r in json.loads(capsys.readouterr().out)["evals"]} == {
        "bpb/code",
        "bpb/text",
        "loss/code",
        "loss/text",
    }


def test_generation_is_the_references_on_the_checkpoint(trained_run):
    """The KV-cached generation against the window recomputed at every step, on the trained model
    (32 positions) and its tokenizer: prompts shorter than the table, one that outgrows it while
    generating, HumanEval prompts longer than it (the window slides from the first step)."""
    loaded = load_checkpoint(trained_run.checkpoint, torch.device("cpu"))
    prompts = ["def f", "the data engine streams pinned snapshots", *(p["prompt"] for p in problems(2))]
    lengths = [len(loaded.tokenizer.load().encode(p, add_special_tokens=False).ids) for p in prompts]
    limit = loaded.config.model.max_seq_len
    assert max(lengths[:2]) < limit < min(lengths[2:]) and limit < 40 + min(lengths)
    model, tokenizer, cpu = loaded.model, loaded.tokenizer, torch.device("cpu")
    for settings in (
        {"samples": 1, "max_new_tokens": 6},
        {"samples": 2, "max_new_tokens": 40, "stop": STOP},
        {"samples": 3, "max_new_tokens": 40, "temperature": 1.0},
    ):
        seeds = [7 + i for i in range(len(prompts))]
        ours = generate(model, tokenizer, prompts, device=cpu, seeds=seeds, batch_rows=4, **settings)
        reference = [
            complete_by_recomputing(model, tokenizer, p, max_seq_len=limit, device=cpu, seed=s, **settings)
            for p, s in zip(prompts, seeds, strict=True)
        ]
        assert ours == reference, settings
    sampled = ours
    assert sampled == generate(model, tokenizer, prompts, device=cpu, seeds=seeds, batch_rows=16, **settings)
    assert len({c for completions in sampled for c in completions}) > 1  # draws over a near-uniform vocabulary differ


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--temperature", "nan", "must be a number >= 0"),
        ("--temperature", "-1", "must be a number >= 0"),
        ("--temperature", "inf", "must be a number >= 0"),
        ("--timeout", "0", "must be a number of seconds > 0"),
        ("--timeout", "abc", "must be a number of seconds > 0"),
    ],
)
def test_sampling_settings_that_cannot_work_are_refused_before_the_checkpoint_is_read(option, value, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["eval", "no-such-checkpoint", "--suite", "humaneval", option, value])
    assert exited.value.code == 2
    assert f"argument {option}: {message}" in capsys.readouterr().err
