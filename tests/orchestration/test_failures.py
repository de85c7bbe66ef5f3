"""A step that fails marks its asset failed in Dagster with the `factory` command's own error, and
nothing downstream of it runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg
import pytest

from lakehouse.errors import FactoryError, InputError
from orchestration.definition_load import load_definition
from orchestration.graph import build_definitions
from tests.conftest import run_factory as factory_cli
from tests.orchestration.definitions import DEMO_TRAIN, two_sources

pytestmark = pytest.mark.engine  # real Dagster, `factory` subprocesses, torchrun


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


def test_a_training_run_that_fails_in_a_rank_fails_its_step_with_the_ranks_error(tmp_path):
    """`factory run` calls `factory train` in its own process (``InProcessRunner``), and torchrun's
    ranks are processes of their own: the rank's ``error`` line must still reach the step's failure,
    not only the terminal."""
    from factory_cli.run import InProcessRunner
    from orchestration.commands import run_factory

    argv = ["train", "--config", str(DEMO_TRAIN), "--nproc", "1", *_data_that_is_gone(tmp_path)]
    context = dg.build_op_context(resources={"commands": InProcessRunner()})
    with context, pytest.raises(dg.Failure) as failed:
        run_factory(context, argv)
    assert re.fullmatch(
        r"factory train exited with 2: error \(rank 0\): component 'prose': 1 data file\(s\) .* are missing .*",
        failed.value.description,
    ), failed.value.description


def _data_that_is_gone(folder: Path) -> list[str]:
    """``--set`` overrides for a tokenizer and a manifest whose one data file is gone: refused by a
    rank when it starts reading, after torchrun started it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from mixtures.manifest import ComponentManifest, DataFile, Manifest

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=alphabet)
    tokenizer.train_from_iterator(["a few words of prose"] * 10, trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    files = (DataFile((folder / "gone.parquet").as_uri(), 100, (100,), 10_000, 10_000),)
    Manifest("m", 0, (ComponentManifest("prose", "raw.prose", 1, 1.0, files, {}),), {"name": "t"}).save(
        folder / "manifest.json"
    )
    return [f"--set=data.{key}='{folder / f'{key}.json'}'" for key in ("manifest", "tokenizer")] + [
        f"--set=run.dir='{folder / 'run'}'",
        "--set=data.num_shards=1",
    ]


def test_factory_run_says_a_failed_step_once_in_one_error_line_without_dagsters_log(factory_home, tmp_path):
    path = two_sources(tmp_path)
    (tmp_path / "web" / "part-0.jsonl").write_text(json.dumps({"text": "no id field here"}) + "\n")
    done = factory_cli("run", str(path), "--select", "web/raw")
    assert done.returncode == 2, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "Stack Trace" not in said and "STEP_FAILURE" not in said and "Traceback" not in said, said[-3000:]
    failed = [line for line in done.stderr.splitlines() if line.startswith("error: step")]
    assert failed == [done.stderr.splitlines()[-1]], said[-3000:]  # once, last
    assert failed[0].startswith("error: step web__raw failed: factory ingest exited with 2: error: "), failed
    assert "'id' (--id-field)" in failed[0], failed
    verbose = factory_cli("run", str(path), "--select", "web/raw", "-v")
    assert verbose.returncode == 2 and "STEP_FAILURE" in verbose.stderr and "Stack Trace" in verbose.stderr


def _chained() -> None:
    try:
        Path("/nonexistent/file").read_text()
    except OSError as exc:
        raise InputError("cannot read /nonexistent/file") from exc


def _failure() -> None:
    raise dg.Failure(description="factory ingest exited with 2: error: no id field")


def _bug() -> None:
    raise KeyError("bug")


@pytest.mark.parametrize(
    ("fail", "said"),
    [
        (_failure, "factory ingest exited with 2: error: no id field"),
        (_chained, "cannot read /nonexistent/file"),  # our error, not the OSError it was raised from
        (_bug, "KeyError: 'bug'"),  # not ours: its class says what it is
    ],
)
def test_a_failed_steps_error_is_its_own_message_without_dagsters_or_our_class_names(fail, said):
    from factory_cli.run import report

    @dg.asset
    def step() -> None:
        fail()

    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([step], instance=instance, raise_on_error=False)
    with pytest.raises(FactoryError) as failed:
        report(result)
    assert str(failed.value) == f"step step failed: {said}"


def test_what_a_skipped_step_waits_for_is_printed_with_the_steps_not_run(capsys):
    from factory_cli.run import report, step_warnings

    @dg.asset(output_required=False)
    def mixture(context):  # annotated, Dagster would read the annotation as a string
        context.log.warning("mixture both waits, and the runs on it: web has no production snapshot")
        yield from ()

    @dg.asset(deps=[mixture])
    def run() -> None:
        raise AssertionError("a step whose input was not made runs")

    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([mixture, run], instance=instance, raise_on_error=False)
        assert step_warnings(instance, result.run_id) == [
            ("mixture", "mixture both waits, and the runs on it: web has no production snapshot")
        ]
    report(result)
    assert "not run, waiting for what they need (see the warnings above): run" in capsys.readouterr().out
