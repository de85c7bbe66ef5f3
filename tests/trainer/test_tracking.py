"""Training runs, and evals of their checkpoints, in MLflow: a real `mlflow server`, the default SQLite
store under $FACTORY_HOME, a dead server and an unwritable store. Each run is a real tiny training
run under torchrun (gloo) on a tiny lakehouse written with pyiceberg (no Spark); what MLflow holds
is read back through MlflowClient and compared with the run folder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_factory
from tests.experiments.lakehouse_setup import Lakehouse, enter_lake, lake_fixture
from tests.mlflow_server import MlflowServer
from tests.ports import free_port

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PASSWORD = "hunter2-not-for-mlflow"


lake = lake_fixture("tracking-home")


@pytest.fixture
def in_lake(lake: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> Lakehouse:
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    return enter_lake(lake, monkeypatch)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    yield server
    server.stop()


def train(lake: Lakehouse, run_dir: Path, *sets: str, nproc: int = 1, env: dict | None = None, resume: bool = False):
    argv = ["train", "--config", str(lake.config), "--nproc", str(nproc), "--set", f"run.dir='{run_dir}'"]
    for override in (
        "mlflow.enabled=true",
        "eval.every=2",
        "checkpoint.every=2",
        *sets,
    ):  # the suite sets FACTORY_MLFLOW=off
        argv += ["--set", override]
    proc = run_factory(
        *argv, *(["--resume"] if resume else []), env={"OMP_NUM_THREADS": "1", **(env or {})}, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def jsonl_metrics(run_dir: Path) -> dict[str, list[tuple[int, float, int]]]:
    """Every number of metrics.jsonl as MLflow should hold it: ``kind/key[/sub]`` → (step, value, ms)."""
    found: dict[str, list[tuple[int, float, int]]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        stamp = round(record["time"] * 1000)
        for key, value in record.items():
            if key in ("step", "kind", "time"):
                continue
            values = value.items() if isinstance(value, dict) else [(None, value)]
            for sub, number in values:
                name = f"{record['kind']}/{key}" + (f"/{sub}" if sub else "")
                found.setdefault(name, []).append((record["step"], float(number), stamp))
    return found


def history(client, run_id: str, key: str) -> list[tuple[int, float, int]]:
    return sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(run_id, key))


def test_a_run_on_a_tracking_server_holds_the_run_folders_params_metrics_and_tags(in_lake, server, tmp_path):
    from mlflow import MlflowClient

    run_dir = tmp_path / "on-server"
    train(in_lake, run_dir, nproc=2, env={"MLFLOW_TRACKING_URI": server.uri})

    record = json.loads((run_dir / "mlflow.json").read_text())
    assert record["tracking_uri"] == server.uri and record["experiment"] == "factory/train"
    client = MlflowClient(server.uri)
    run = client.get_run(record["run_id"])
    assert run.info.status == "FINISHED" and run.info.experiment_id == record["experiment_id"]
    assert run.info.run_name == run_dir.name

    resolved = json.loads((run_dir / "config.resolved.json").read_text())
    assert run.data.params == {
        f"{section}.{key}": value if isinstance(value, str) else json.dumps(value)
        for section, values in resolved.items()
        for key, value in values.items()
    }
    assert run.data.params["model.vocab_size"] == str(resolved["model"]["vocab_size"]) != "0"

    expected = jsonl_metrics(run_dir)
    assert {"train/loss", "train/lr", "train/tokens_per_s", "train/data_wait_frac", "eval/code/loss"} <= set(expected)
    assert set(run.data.metrics) == set(expected)
    for key, points in expected.items():
        assert history(client, run.info.run_id, key) == sorted(points), key
    assert [step for step, _, _ in expected["train/loss"]] == [1, 2, 3]

    checkpoints = sorted((run_dir / "checkpoints").iterdir())
    assert [c.name for c in checkpoints] == ["step-2", "step-3"]
    lineage = json.loads((checkpoints[-1] / "lineage.json").read_text())
    tags = run.data.tags
    assert tags["factory.run_id"] == str(run_dir)
    assert tags["factory.manifest_fingerprint"] == lineage["manifest"]["fingerprint"]
    assert tags["factory.checkpoint"] == str(checkpoints[-1])
    assert json.loads(tags["factory.checkpoints"]) == [str(c) for c in checkpoints]
    assert tags["factory.world_size"] == "2"
    for checkpoint in checkpoints:  # and the other way: every checkpoint names its MLflow run
        assert json.loads((checkpoint / "lineage.json").read_text())["mlflow"] == record

    # The eval goes where the training went, found through the checkpoint (no tracking URI set here).
    proc = run_factory("eval", str(run_dir), "--suite", "heldout")
    assert proc.returncode == 0, proc.stderr[-3000:]
    from evals.results import checkpoint_results
    from lakehouse.catalog import load_catalog

    rows = checkpoint_results(load_catalog(), str(checkpoints[-1]))
    assert {r["metric"] for r in rows} == {f"{m}/{c}" for m in ("loss", "bpb") for c in ("text", "code", "num")}
    for row in rows:
        points = client.get_metric_history(run.info.run_id, f"evals/heldout/{row['metric']}")
        assert [(m.step, m.value) for m in points] == [(3, row["value"])]

    shown = run_factory("lineage", str(run_dir))
    assert f"mlflow run {record['run_id']}  experiment factory/train  at {server.uri}" in shown.stdout


def test_the_default_store_is_sqlite_under_factory_home_and_a_resumed_run_continues_its_mlflow_run(in_lake, tmp_path):
    from mlflow import MlflowClient

    run_dir = tmp_path / "default-store"
    run_dir.mkdir()
    (run_dir / "factory.json").write_text(json.dumps({"factory": "demo", "run": "small"}))  # as orchestration writes
    train(in_lake, run_dir, "train.steps=2")
    first = json.loads((run_dir / "mlflow.json").read_text())
    store = f"sqlite:///{in_lake.home / 'mlflow' / 'mlflow.db'}"
    assert first["tracking_uri"] == store and first["experiment"] == "factory/demo/small"

    # Killed after logging step 3, before its checkpoint landed: the resume trains step 3 again.
    train(in_lake, run_dir, "train.steps=3", resume=True)
    shutil.rmtree(run_dir / "checkpoints" / "step-3")
    resumed = train(in_lake, run_dir, "train.steps=4", resume=True)
    assert json.loads((run_dir / "mlflow.json").read_text()) == first
    client = MlflowClient(store)
    run = client.get_run(first["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.tags["factory.factory"] == "demo" and run.data.tags["factory.run"] == "small"
    logged = jsonl_metrics(run_dir)["train/loss"]
    assert [step for step, _, _ in logged] == [1, 2, 3, 3, 4] and logged[2][1] == logged[3][1]
    # MLflow holds each step once: the repeated step is not logged again (its value is the same).
    assert history(client, first["run_id"], "train/loss") == sorted(logged[:3] + logged[4:])
    # MLflow never changes a param: the resumed run keeps the first value, and says so.
    assert run.data.params["train.steps"] == "2"
    assert "keeps the first values of train.steps" in resumed.stderr
    assert len(client.search_runs([first["experiment_id"]])) == 1


@pytest.mark.parametrize("store", ["dead-server", "unwritable"])
def test_a_dead_tracker_warns_once_and_the_run_trains_to_its_end(in_lake, tmp_path, store):
    run_dir = tmp_path / store
    if store == "dead-server":  # nothing listens there; the credential must not reach any output
        env, sets = {"MLFLOW_TRACKING_URI": f"http://factory:{PASSWORD}@127.0.0.1:{free_port()}"}, ()
    else:
        (tmp_path / "a-file").write_text("")  # the store's folder would have to be inside a file
        env, sets = {}, (f"mlflow.tracking_uri='sqlite:///{tmp_path / 'a-file' / 'mlflow.db'}'",)
    proc = train(in_lake, run_dir, *sets, nproc=2, env=env)

    warnings = [line for line in proc.stderr.splitlines() if "MLflow at" in line]
    assert len(warnings) == 1 and "the run goes on without it" in warnings[0], proc.stderr[-3000:]
    assert [s for s, _, _ in jsonl_metrics(run_dir)["train/loss"]] == [1, 2, 3]
    assert sorted(c.name for c in (run_dir / "checkpoints").iterdir()) == ["step-2", "step-3"]
    assert not (run_dir / "mlflow.json").exists()
    assert "mlflow" not in json.loads((run_dir / "checkpoints" / "step-3" / "lineage.json").read_text())
    written = "".join(p.read_text(errors="replace") for p in run_dir.rglob("*.json*") if p.is_file())
    assert PASSWORD not in proc.stderr + proc.stdout + written


def test_with_tracking_off_the_trainer_never_imports_mlflow(in_lake, tmp_path):
    script = (
        "import sys; from trainer.train import main; "
        f"code = main(['--config', {str(in_lake.config)!r}, '--set', \"run.dir='{tmp_path / 'off'}'\", "
        "'--set', 'mlflow.enabled=false']); print('mlflow' in sys.modules, code)"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600)
    trained, probe = proc.stdout.splitlines()  # the line a run that trained ends with, then the probe's
    assert trained.startswith("trained to step ") and probe.split() == ["False", "0"], proc.stderr[-3000:]
    assert not (tmp_path / "off" / "mlflow.json").exists()
