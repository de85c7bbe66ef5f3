"""What the trainer gives MLflow, checked without a training run: params redacted and flattened,
metric names MLflow takes, where runs go, and the config's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakehouse.errors import ConfigError
from trainer.config import load_config
from trainer.tracking import checkpoint_tags, metric_values, recorded_uri, run_params, tracking_uri

DATA = {"manifest": "m.json", "tokenizer": "t.json"}


def test_params_are_the_config_flattened_with_every_credential_redacted():
    config = {
        "optim": {"lr": 0.01, "betas": (0.9, 0.95)},
        "train": {"compile": False},
        "data": {"manifest": "/runs/m.json"},
        "catalog": {"uri": "postgresql://factory:s3cret-pw@db:5432/iceberg", "options": "?password=s3cret-pw"},
    }
    params = run_params(config)
    assert params["optim.lr"] == "0.01" and params["optim.betas"] == "[0.9, 0.95]"
    assert params["train.compile"] == "false" and params["data.manifest"] == "/runs/m.json"
    assert "s3cret-pw" not in json.dumps(params) and params["catalog.uri"].startswith("postgresql://factory:***@db")


def test_metrics_are_the_numbers_of_a_record_under_names_mlflow_takes():
    values = {"code": {"loss": 2.5, "tokens": 96}, "pass@1": 0.25, "resumed": True, "note": "text", "curve": [1, 2]}
    assert metric_values("eval", values) == {
        "eval/code/loss": 2.5,
        "eval/code/tokens": 96.0,
        "eval/pass_at_1": 0.25,
        "eval/resumed": 1.0,
    }


def test_runs_go_to_the_config_then_the_environment_then_sqlite_under_factory_home(factory_home, monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri() == f"sqlite:///{factory_home.resolve() / 'mlflow' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracker:5000")
    assert tracking_uri() == "http://tracker:5000"
    assert tracking_uri("http://other:5000") == "http://other:5000"
    monkeypatch.chdir(tmp_path)
    assert tracking_uri("sqlite:///runs.db") == f"sqlite:///{tmp_path.resolve() / 'runs.db'}"


def test_a_recorded_uri_with_a_credential_is_reached_only_through_the_same_server_in_the_environment(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert recorded_uri({"tracking_uri": "http://tracker:5000"}) == "http://tracker:5000"
    redacted = {"tracking_uri": "http://me:***@tracker:5000"}
    assert recorded_uri(redacted) is None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://me:pw@elsewhere:5000")
    assert recorded_uri(redacted) is None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://me:pw@tracker:5000")
    assert recorded_uri(redacted) == "http://me:pw@tracker:5000"


def test_the_config_refuses_a_tracking_uri_with_a_credential_and_a_non_boolean_switch():
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_PASSWORD"):
        load_config(None, raw={"data": DATA, "mlflow": {"tracking_uri": "https://me:pw@tracker"}})
    with pytest.raises(ConfigError, match=r"mlflow\.enabled must be true or false"):
        load_config(None, ["mlflow.enabled=off"], raw={"data": DATA})
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(None, ["mlflow.uri=http://tracker"], raw={"data": DATA})
    cfg = load_config(None, ["mlflow.enabled=false"], raw={"data": DATA})
    assert cfg.mlflow.enabled is False and cfg.to_dict()["mlflow"]["experiment"] == ""


def test_checkpoint_tags_keep_the_newest_that_fit_in_a_tag():
    paths = [Path(f"/r/{'x' * 1000}/checkpoints/step-{i}") for i in range(10)]
    tags = checkpoint_tags(paths)
    kept = json.loads(tags["factory.checkpoints"])
    assert tags["factory.checkpoint"] == str(paths[-1]) == kept[-1]
    assert len(tags["factory.checkpoints"]) <= 8000 and kept == [str(p) for p in paths[-len(kept) :]] and len(kept) < 10
    assert checkpoint_tags([]) == {}
