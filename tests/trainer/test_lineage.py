"""Walking snapshot summaries from a manifest's snapshot back to the raw inputs (real catalog)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factory_cli.main import main
from lakehouse.catalog import ensure_table
from lakehouse.commit import Run, commit_files
from lakehouse.decisions import record_decision
from lakehouse.refs import PinnedRef
from lakehouse.schemas import DOCUMENT_SCHEMA
from rl.train_config import load_rl_config
from tests.conftest import factory_here, run_factory
from tests.decisions import (
    ablation_decision,
    gate_decision,
    hand_made_checkpoint,
    mixture_decision,
    pinned_manifest,
    write_run_record,
)
from tests.rl_section import CRAFTED_RL, RL_SECTION, rl_section
from trainer.lineage import format_lineage, pipeline_runs


def commit(catalog, table: str, job: str, run_id: str, inputs: list[dict], stats: dict) -> int:
    identifier = tuple(table.split("."))
    ensure_table(catalog, identifier, DOCUMENT_SCHEMA)
    run = Run(job=job, run_id=run_id, params={"p": run_id}, inputs=inputs)
    return commit_files(catalog, identifier, [], run, stats).snapshot_id


def test_runs_are_walked_back_to_the_raw_inputs(catalog):
    first = commit(catalog, "raw.code", "ingest", "ing-1", [{"uri": "file:///src/a"}], {"kept": 5})
    second = commit(catalog, "raw.code", "ingest", "ing-2", [{"uri": "file:///src/b"}], {"kept": 3})
    raw = PinnedRef(("raw", "code"), second, None).as_input()
    deduped = commit(catalog, "dedup.code", "dedup", "dd-1", [raw], {"kept": 7})
    dedup_input = PinnedRef(("dedup", "code"), deduped, None).as_input()
    filtered = commit(catalog, "filtered.code", "filter", "fl-1", [dedup_input], {"kept": 6})

    (filter_run,) = pipeline_runs(catalog, "filtered.code", filtered)
    assert (filter_run["job"], filter_run["run_id"], filter_run["stats"]) == ("filter", "fl-1", {"kept": 6})
    (dedup_run,) = filter_run["inputs"][0]["runs"]
    assert dedup_run["job"] == "dedup" and dedup_run["params"] == {"p": "dd-1"}
    ingests = dedup_run["inputs"][0]["runs"]
    # Both appends make up raw.code@second: both ingests are in its lineage, newest first.
    assert [r["run_id"] for r in ingests] == ["ing-2", "ing-1"]
    assert [r["inputs"] for r in ingests] == [[{"uri": "file:///src/b"}], [{"uri": "file:///src/a"}]]
    assert pipeline_runs(catalog, "raw.code", first)[0]["run_id"] == "ing-1"

    text = format_lineage(
        {
            "checkpoint": "runs/x/checkpoints/step-4",
            "step": 4,
            "code_version": "0.1.0",
            "manifest": {"path": "m.json", "fingerprint": "abc"},
            "tokenizer": {"path": "t.json", "sha256": "f" * 64},
            "loader_position": {"next_global_batch": 4, "sequences": 32, "tokens": 1024},
            "components": [
                {"name": "code", "weight": 1.0, "table": "filtered.code", "snapshot_id": filtered, "runs": [filter_run]}
            ],
        }
    )
    assert "filter run fl-1" in text and "dedup run dd-1" in text and "from file:///src/a" in text


def shaped_run(catalog, home: Path) -> tuple[Path, dict[str, dict]]:
    """A run on a manifest of two real tables, with decisions that shaped its data and others
    that did not recorded around it; its factory.json names one decision that is not recorded."""
    manifest, (code,), text = pinned_manifest(catalog, home / "manifest.json")
    decisions = {
        "gate": gate_decision("code", production=3, candidate=code, decided_at="2026-01-01T00:00:00+00:00"),
        # Refused: the tag stayed on text's pinned snapshot, but a refusal shaped nothing.
        "refused": gate_decision("text", "refused", table="filtered.text", production=text, candidate=text + 1),
        "other gate": gate_decision("code", production=code, candidate=code + 1),  # promoted, not pinned here
        "mixture": mixture_decision(after_fingerprint=manifest.fingerprint, decided_at="2026-01-02T00:00:00+00:00"),
        "other mixture": mixture_decision(
            after_fingerprint="sha256:" + "cd" * 32, components={"code": f"decontaminated.code@{code + 1}"}
        ),
        "ablation": ablation_decision(decided_at="2026-01-03T00:00:00+00:00"),
        "rejected": ablation_decision("warmup", "rejected"),
    }
    for row in decisions.values():
        assert record_decision(catalog, row) is not None  # each its own decision
    run_dir = home / "runs" / "tiny"
    hand_made_checkpoint(run_dir, home / "manifest.json")
    write_run_record(run_dir, "tiny", [decisions["ablation"]["decision_id"], "ablation-gone-0000"])
    return run_dir, decisions


def test_lineage_names_the_decisions_that_shaped_its_data(catalog, factory_home, capsys):
    run_dir, decisions = shaped_run(catalog, factory_home)
    assert main(["lineage", str(run_dir), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    # The gate that promoted a pinned snapshot, the mixture that made the manifest, the ablation
    # the run's factory.json names: oldest first, whole rows.
    assert printed["decisions"] == [decisions["gate"], decisions["mixture"], decisions["ablation"]]
    assert printed["decisions_not_found"] == ["ablation-gone-0000"]

    assert main(["lineage", str(run_dir / "checkpoints" / "step-4")]) == 0
    text = capsys.readouterr().out
    assert text.index("data:") < text.index("decisions that shaped it") < text.index("evals: none yet")
    lines = text[text.index("decisions that shaped it") :].splitlines()[1:5]
    gate, mixture, ablation = (decisions[k] for k in ("gate", "mixture", "ablation"))
    assert lines[0] == f"  refinement-gate code: promoted, {gate['reason']}  [{gate['decision_id']}]"
    assert lines[1].startswith("  mixture main: determined, a search of 8") and mixture["decision_id"] in lines[1]
    assert lines[2].startswith("  ablation lr: adopted, low-lr") and ablation["decision_id"] in lines[2]
    assert lines[3] == "  [ablation-gone-0000] named by the run's factory.json, not recorded in this catalog"


def test_a_run_record_is_optional_and_a_broken_one_is_named(factory_home, tmp_path, capsys):
    run_dir, _ = _hand_made_run(tmp_path)
    assert main(["lineage", str(run_dir)]) == 0  # no factory.json: a run started by hand
    assert "decisions: none recorded for its snapshots, manifest or run" in capsys.readouterr().out
    assert not factory_home.exists()  # no lakehouse here, and none made just to look

    write_run_record(run_dir, "r", ["mixture-m-00"])
    assert main(["lineage", str(run_dir), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["decisions"] == [] and printed["decisions_not_found"] == ["mixture-m-00"]

    (run_dir / "factory.json").write_text('{"decisions": ["cut sho')
    assert main(["lineage", str(run_dir)]) == 2
    assert f"{run_dir / 'factory.json'} is not JSON" in capsys.readouterr().err
    (run_dir / "factory.json").write_text('{"decisions": "mixture-m-00"}')
    assert main(["lineage", str(run_dir)]) == 2
    assert '"decisions" should be a list of decision ids' in capsys.readouterr().err


def test_a_credential_in_a_lineage_file_is_masked_in_what_lineage_prints(factory_home, tmp_path, capsys):
    """The writers mask what they record, but a lineage.json edited by hand, or by an older
    trainer, was printed as it was, where factory export masked it."""
    manifest = {"name": "m", "fingerprint": "sha256:" + "12" * 32, "components": []}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    run_dir = tmp_path / "run"
    checkpoint = hand_made_checkpoint(run_dir, tmp_path / "manifest.json")
    lineage = json.loads((checkpoint / "lineage.json").read_text())
    lineage["manifest"]["path"] = "s3://AKIAEXAMPLE:SeCrEt-42@bucket/manifest.json"
    (checkpoint / "lineage.json").write_text(json.dumps(lineage))
    for flags in ([], ["--json"]):
        assert main(["lineage", str(run_dir), *flags]) == 0
        out = capsys.readouterr().out
        assert "bucket/manifest.json" in out and "SeCrEt-42" not in out and "AKIAEXAMPLE" not in out


@pytest.mark.slow
def test_factory_lineage_prints_the_decisions_after_the_data(catalog, factory_home):
    run_dir, decisions = shaped_run(catalog, factory_home)
    done = run_factory("lineage", str(run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    after_data = done.stdout[done.stdout.index("data:") :]
    for key in ("gate", "mixture", "ablation"):
        assert decisions[key]["decision_id"] in after_data
    for key in ("refused", "other gate", "other mixture", "rejected"):
        assert decisions[key]["decision_id"] not in done.stdout


def test_an_rl_checkpoint_shows_its_task_snapshot_rollouts_and_config():
    rl = RL_SECTION
    inherited = {  # the starting checkpoint's, as an RL checkpoint keeps them
        "manifest": {"path": "m.yaml", "fingerprint": "f"},
        "tokenizer": {"path": "tok.json", "sha256": "0" * 64},
        "loader_position": {"next_global_batch": 40, "sequences": 320, "tokens": 20480},
    }
    shown = format_lineage({"checkpoint": "/runs/rl/checkpoints/step-4", "step": 4, **inherited, "rl": rl})
    assert "reinforcement learning from checkpoint /runs/pre/checkpoints/step-40 (step 40)" in shown
    assert "  tasks rl.tasks@11 (built by rl-build-1 from raw.rl_repositories@7)" in shown
    assert "  rollouts rl.rollouts@22 (run rl-abc)" in shown
    assert "  config: seed 3, 4 steps of 2 tasks x 4 samples, kl_beta 0.04, lr 0.01" in shown
    # The starting checkpoint's pre-training comes after the RL run's own part, and says whose it is.
    own, _, inherited_part = shown.partition("pre-trained, as its starting checkpoint says:\n")
    assert "rollouts rl.rollouts@22" in own and "loader position" not in own
    assert inherited_part.startswith("manifest m.yaml") and "next global batch 40" in inherited_part


def test_a_damaged_checkpoint_folder_is_refused_naming_what_is_wrong(tmp_path, capsys):
    from trainer.checkpoint import COMPLETE

    folder = tmp_path / "checkpoints" / "step-5"
    folder.mkdir(parents=True)
    (folder / COMPLETE).write_text("")
    (folder / "lineage.json").write_text("{bad")
    (folder / ".metadata").write_bytes(b"")
    # The first as a user runs it; the other refusals in this process (a fresh one costs seconds).
    for done in (
        run_factory("lineage", str(folder)),
        factory_here(capsys, "export", str(folder), "--format", "hf", "--output", str(tmp_path / "x")),
    ):
        assert done.returncode == 2 and "lineage.json is not the JSON a checkpoint's lineage is" in done.stderr, (
            done.stderr
        )
        assert "Traceback" not in done.stderr
    (folder / "lineage.json").write_text('{"x": 1}')
    assert "not a checkpoint's lineage (no manifest in it)" in factory_here(capsys, "lineage", str(folder)).stderr
    good = {
        "step": 5, "manifest": {"path": "m.json", "fingerprint": "f" * 16},
        "tokenizer": {"path": "tokenizer.json", "sha256": "f" * 64},
        "loader_position": {"next_global_batch": 5, "sequences": 40, "tokens": 1280},
    }  # fmt: skip
    commands = {"lineage": (), "eval": (), "export": ("-o", str(tmp_path / "x"))}
    for key, command in [("loader_position", "lineage"), ("step", "lineage"), *(("tokenizer", c) for c in commands)]:
        (folder / "lineage.json").write_text(json.dumps({k: v for k, v in good.items() if k != key}))
        done = factory_here(capsys, command, str(folder), *commands[command])
        assert done.returncode == 2 and "Traceback" not in done.stderr, (command, done.stderr[-2000:])
        assert f"lacks {key}" in done.stderr, (command, done.stderr[-2000:])
    (folder / "lineage.json").write_text(json.dumps({**good, "tokenizer": "path sha256"}))  # a string, not an object
    done = factory_here(capsys, "lineage", str(folder))
    assert done.returncode == 2 and "lacks tokenizer of a checkpoint's lineage" in done.stderr, done.stderr[-2000:]
    (folder / "lineage.json").write_text(json.dumps(good))  # written by hand: no config to build the model from
    done = factory_here(capsys, "export", str(folder), "-o", str(tmp_path / "x"))
    assert done.returncode == 2 and "lacks config of a checkpoint's lineage" in done.stderr, done.stderr[-2000:]
    (folder / ".metadata").unlink()  # what factory lineage does not need, and eval and export do
    done = factory_here(capsys, "eval", str(folder))
    assert done.returncode == 2 and "is not a checkpoint (no .metadata" in done.stderr, done.stderr


def test_a_run_reached_again_is_shown_once_so_the_tree_grows_with_the_runs_not_their_square():
    """Under each refresh's dedup, raw's snapshot lists every ingest run before it (an append table),
    and its --against, its own last output, every earlier dedup: shown in full each time, 5 refreshes
    gave 583 lines."""

    def ingest(n):
        return {"job": "ingest", "run_id": f"i{n}", "table": "raw.web", "snapshot_id": n, "committed_at": "t",
                "stats": {}, "inputs": [{"uri": f"file:///web/part-{n}"}]}  # fmt: skip

    def dedup(n):
        inputs = [{"table": "raw.web", "snapshot_id": n, "runs": [ingest(k) for k in range(1, n + 1)]}]
        if n > 1:
            inputs.append({"table": "dedup.web", "snapshot_id": 100 + n - 1, "runs": [dedup(k) for k in range(1, n)]})
        return {"job": "dedup", "run_id": f"d{n}", "table": "dedup.web", "snapshot_id": 100 + n, "committed_at": "t",
                "stats": {}, "inputs": inputs}  # fmt: skip

    lineage = {
        "step": 4, "manifest": {"path": "m.json", "fingerprint": "f"},
        "tokenizer": {"path": "t.json", "sha256": "0" * 64},
        "loader_position": {"next_global_batch": 4, "sequences": 32, "tokens": 2048},
        "components": [{"name": "web", "weight": 1.0, "table": "dedup.web", "snapshot_id": 110,
                        "runs": [dedup(k) for k in range(1, 11)]}],
    }  # fmt: skip
    shown = format_lineage(lineage)
    for n in range(1, 11):  # every run once
        assert shown.count(f"└─ dedup run d{n} ") == 1 and shown.count(f"└─ ingest run i{n} ") == 1, shown
    assert "… and 9 run(s) shown above" in shown
    assert len(shown.splitlines()) < 120


def _hand_made_run(tmp_path) -> tuple[Path, Path]:
    """A run folder with one hand-made checkpoint of a one-component manifest: (run, checkpoint)."""
    manifest = {
        "name": "m",
        "fingerprint": "sha256:" + "12" * 32,
        "components": [{"name": "a", "table": "raw.a", "snapshot_id": 5, "weight": 1.0}],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    run_dir = tmp_path / "run"
    return run_dir, hand_made_checkpoint(run_dir, tmp_path / "manifest.json")


def _crafted_run(factory_home, tmp_path, run: dict) -> Path:
    run_dir, checkpoint = _hand_made_run(tmp_path)
    lineage = json.loads((checkpoint / "lineage.json").read_text())
    lineage["components"][0]["runs"] = [run]
    (checkpoint / "lineage.json").write_text(json.dumps(lineage))
    return run_dir


_RUN = {
    "table": "raw.a", "snapshot_id": 5, "job": "ingest", "run_id": "ing-1", "committed_at": "2026-01-01T00:00:00",
    "stats": {"kept": 3}, "inputs": [{"uri": "file:///src/a"}],
}  # fmt: skip


def _without(value: dict, key: str) -> dict:
    return {k: v for k, v in value.items() if k != key}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"table": None}, "components[0].runs[0].table"),
        ({"inputs": "file:///src/a"}, "components[0].runs[0].inputs (a list of objects)"),
        ({"stats": [1]}, "components[0].runs[0].stats (an object)"),
        ({"inputs": [{"table": "raw.b", "runs": [{"job": "x"}]}]}, "components[0].runs[0].inputs[0].snapshot_id"),
        ({"inputs": [{"table": "raw.b", "snapshot_id": 1, "runs": [_without(_RUN, "run_id")]}]}, ".runs[0].run_id"),
        # Wrong types where more than text is made of them: a link, an int, a set's key.
        ({"snapshot_id": "5"}, "components[0].runs[0].snapshot_id (an integer)"),
        ({"table": 7}, "components[0].runs[0].table (a string)"),
        (
            {"inputs": [{"table": "raw.b", "snapshot_id": [1]}]},
            "components[0].runs[0].inputs[0].snapshot_id (an integer)",
        ),
    ],
)
def test_a_crafted_run_in_a_lineage_file_is_refused_naming_the_key(factory_home, tmp_path, capsys, change, named):
    run = {k: v for k, v in {**_RUN, **change}.items() if v is not None}
    run_dir = _crafted_run(factory_home, tmp_path, run)
    assert main(["lineage", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "lineage.json lacks" in err and named in err and "the folder is damaged" in err, err


def test_control_characters_in_a_lineage_file_are_printed_escaped(factory_home, tmp_path, capsys):
    """A run id that would turn the terminal red, or move its cursor, is shown as what it holds."""
    run_dir = _crafted_run(factory_home, tmp_path, {**_RUN, "run_id": "ing-\x1b[31mred\x1b[0m\r\u202e"})
    assert main(["lineage", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "run ing-\\x1b[31mred\\x1b[0m\\r\\u202e → raw.a@5" in out, out
    assert "\x1b" not in out and "\r" not in out


@pytest.mark.parametrize("crafted", CRAFTED_RL)
def test_a_crafted_rl_section_is_refused_naming_the_file_and_key(factory_home, tmp_path, capsys, crafted):
    change, named = CRAFTED_RL[crafted]
    rl = rl_section(change)
    run_dir, checkpoint = _hand_made_run(tmp_path)
    lineage = json.loads((checkpoint / "lineage.json").read_text())
    (checkpoint / "lineage.json").write_text(json.dumps({**lineage, "rl": rl}))
    assert main(["lineage", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"{checkpoint / 'lineage.json'} lacks" in err and named in err and "RL checkpoint's lineage" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("inputs", "named"),
    [
        ('[{"table": "raw.r", "snapshot_id": 7', "is not a JSON list of inputs"),
        ('{"table": "raw.r"}', "holds a dict, not a JSON list of inputs"),
        ('[{"table": "raw.r", "snapshot_id": "7"}]', "input [0] is"),
    ],
)
def test_the_tasks_inputs_of_an_rl_section_are_checked_as_a_snapshots_are(
    factory_home, tmp_path, capsys, inputs, named
):
    run_dir, checkpoint = _hand_made_run(tmp_path)
    lineage = json.loads((checkpoint / "lineage.json").read_text())
    rl = rl_section(lambda rl: rl["tasks"].update(inputs=inputs))
    (checkpoint / "lineage.json").write_text(json.dumps({**lineage, "rl": rl}))
    assert main(["lineage", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"{checkpoint / 'lineage.json'} at rl.tasks.inputs" in err and named in err, err


def test_an_rl_checkpoint_as_it_is_written_is_printed(factory_home, tmp_path, capsys):
    run_dir, checkpoint = _hand_made_run(tmp_path)
    lineage = json.loads((checkpoint / "lineage.json").read_text())
    # As lineage_record writes it: the whole config, a start's identity, no rollouts committed yet.
    config = load_rl_config(None, raw={"start": {"checkpoint": "/runs/pre"}}).to_dict()
    start = {**RL_SECTION["start"], "identity": "x", "rl": None}
    rl = rl_section(lambda rl: rl.update(rollouts=None, start=start, config=config))
    (checkpoint / "lineage.json").write_text(json.dumps({**lineage, "rl": rl}))
    assert main(["lineage", str(run_dir)]) == 0
    assert "tasks rl.tasks@11 (built by rl-build-1 from raw.rl_repositories@7)" in capsys.readouterr().out


def test_a_tokenizer_hash_that_is_no_string_is_refused_naming_the_key(factory_home, tmp_path, capsys):
    run_dir, checkpoint = _hand_made_run(tmp_path)
    lineage = json.loads((checkpoint / "lineage.json").read_text())
    lineage["tokenizer"]["sha256"] = 12345
    (checkpoint / "lineage.json").write_text(json.dumps(lineage))
    assert main(["lineage", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "lacks tokenizer.sha256 (a string) of a checkpoint's lineage" in err and "Traceback" not in err, err


def test_a_checkpoint_records_its_path_absolute_when_run_dir_was_given_relative(tmp_path, monkeypatch):
    """So that lineage, eval and export, run from another folder, find the checkpoint it names."""
    from trainer.config import load_config
    from trainer.train import lineage_record

    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["run.dir=runs/x"], raw={"data": {"manifest": "m.json", "tokenizer": "t.json"}})
    record = lineage_record({}, Path(cfg.run.dir), 4, {"batch": 4}, cfg)
    assert record["checkpoint"] == str(tmp_path.resolve() / "runs" / "x" / "checkpoints" / "step-4")


def test_a_relative_checkpoint_path_that_an_older_trainer_recorded_is_still_read(
    factory_home, tmp_path, monkeypatch, capsys
):
    from evals.run import _moved

    _, checkpoint = _hand_made_run(tmp_path)
    lineage = json.loads((checkpoint / "lineage.json").read_text())
    lineage["checkpoint"] = "run/checkpoints/step-4"  # run.dir 'run', from tmp_path
    (checkpoint / "lineage.json").write_text(json.dumps(lineage))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["lineage", str(checkpoint)]) == 0
    assert capsys.readouterr().out.startswith("checkpoint run/checkpoints/step-4  step 4")
    # eval's run id names the path only for a checkpoint read elsewhere than where its run saved it
    here = checkpoint.resolve()
    assert not _moved(here, lineage)  # an older, relative record, read from another folder
    assert not _moved(here, {**lineage, "checkpoint": str(here)})  # as the trainer records it now
    assert _moved(elsewhere / "run" / "checkpoints" / "step-4", {**lineage, "checkpoint": str(here)})  # a copy
