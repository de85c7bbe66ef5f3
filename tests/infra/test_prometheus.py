"""The alert rules and the Grafana dashboard against a real Prometheus (Debian's package) scraping
a real training run (torchrun, 1 rank) whose loader a test holds still."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.corpora import make_table
from tests.ports import free_port

RULES = REPO / "infra" / "prometheus" / "alerts.yml"
DASHBOARD = REPO / "infra" / "grafana" / "training.json"
PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
PAUSED_BATCH = 6
STEPS = 16


def panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)")
def test_the_rules_pass_promtool():
    proc = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 4 rules found" in proc.stdout


def test_the_dashboard_covers_what_a_team_watches():
    titles = " ".join(title.lower() for title, _ in panel_queries())
    for topic in ("tokens/s", "data-wait", "queue depth", "component", "training loss", "eval loss", "step time"):
        assert topic in titles


def quick_rules(path: Path) -> None:
    """The shipped rules, with the stalled-loader alert made to fire within seconds."""
    rules = yaml.safe_load(RULES.read_text())
    (stalled,) = [r for g in rules["groups"] for r in g["rules"] if r["alert"] == "FactoryLoaderStalled"]
    assert "> 120" in stalled["expr"]
    stalled["expr"] = stalled["expr"].replace("> 120", "> 2")
    stalled["for"] = "1s"
    path.write_text(yaml.safe_dump(rules))


def api(base: str, path: str, **params) -> dict:
    url = f"{base}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def training_inputs(catalog, factory_home) -> Path:
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from streaming_loader.tokenizer_train import train_tokenizer

    make_table(catalog, "raw.a", 200, files=2, seed=1)
    make_table(catalog, "raw.b", 200, files=2, seed=2, kind="code")
    spec = {
        "seed": 1,
        "components": [
            {"name": "a", "table": "raw.a", "weight": 0.6, "heldout_fraction": 0.1},
            {"name": "b", "table": "raw.b", "weight": 0.4, "heldout_fraction": 0.1},
        ],
    }
    pin(catalog, spec_from_dict(spec)).save(factory_home / "manifest.json")
    (factory_home / "tokenizer.json").write_text(train_tokenizer(catalog, ["raw.a", "raw.b"], 300).text)
    config = factory_home / "train.toml"
    config.write_text(
        f"""
[data]
manifest = "{factory_home / "manifest.json"}"
tokenizer = "{factory_home / "tokenizer.json"}"
seq_len = 32
global_batch_size = 4
num_shards = 2
[model]
preset = "tiny"
[train]
steps = {STEPS}
[eval]
every = 3
batches = 1
"""
    )
    return config


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (apt-get install prometheus)")
def test_prometheus_scrapes_a_run_every_panel_has_data_and_a_held_loader_fires_the_alert(training_inputs, tmp_path):
    metrics_port, prometheus_port = free_port(), free_port()
    rules = tmp_path / "rules.yml"
    quick_rules(rules)
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {"job_name": "factory", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
                ],
            }
        )
    )
    base = f"http://127.0.0.1:{prometheus_port}"
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prometheus_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    hold, end = tmp_path / "hold", tmp_path / "end"
    hold.mkdir()
    end.mkdir()
    training = None
    try:
        wait_for(lambda: _ready(base), 60, "Prometheus to start")
        started = time.time()
        training = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
             "-m", "trainer.train", "--config", str(training_inputs),
             "--set", f"run.dir='{tmp_path / 'run'}'", "--set", f"run.metrics_port={metrics_port}"],
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1", "FACTORY_PAUSE_AT": f"loader-next-{PAUSED_BATCH}:{hold};after-step-{STEPS}:{end}"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        wait_for(lambda: (hold / "paused").exists() or training.poll() is not None, 300, "the loader to be held")
        assert training.poll() is None, training.stderr.read()[-3000:]
        assert "FactoryLoaderStalled" not in _firing(base)  # held just now: not yet
        wait_for(lambda: "FactoryLoaderStalled" in _firing(base), 60, "the stalled-loader alert to fire")
        (hold / "resume").touch()
        # Prometheus pulls: a run that ends between two scrapes is never seen at its last step, so
        # the run is held there until a scrape has seen it.
        wait_for(lambda: (end / "paused").exists() or training.poll() is not None, 300, "the last step")
        assert training.poll() is None, training.stderr.read()[-3000:]
        wait_for(lambda: _instant(base, "factory_train_step") == STEPS, 60, "a scrape of the last step")
        (end / "resume").touch()
        assert training.wait(timeout=300) == 0, training.stderr.read()[-3000:]
        ended = time.time()
        for title, expr in panel_queries():
            found = api(base, "query_range", query=expr, start=started, end=ended, step=1)
            values = [float(v) for series in found["data"]["result"] for _, v in series["values"]]
            assert any(v == v for v in values), f"panel {title!r}: {expr} returned no data"
        assert _instant(base, "max_over_time(factory_train_step[10m])") == STEPS
    finally:
        if training is not None and training.poll() is None:
            training.kill()
        prometheus.terminate()
        prometheus.wait(timeout=30)


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _instant(base: str, query: str) -> float | None:
    result = api(base, "query", query=query)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def _firing(base: str) -> set[str]:
    alerts = api(base, "alerts")["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def test_a_metrics_port_out_of_range_is_refused(tmp_path):
    from lakehouse.errors import ConfigError
    from trainer.config import load_config

    config = tmp_path / "train.toml"
    config.write_text('[data]\nmanifest = "m.json"\ntokenizer = "t.json"\n')
    with pytest.raises(ConfigError, match=r"run\.metrics_port"):
        load_config(str(config), ["run.metrics_port=70000"])


def test_a_metrics_port_the_last_local_rank_would_pass_is_refused_before_torchrun(tmp_path, capsys):
    """Each rank serves on run.metrics_port + its local rank: 65535 fits one rank, not two."""
    from factory_cli.main import main

    config = tmp_path / "train.toml"
    config.write_text('[data]\nmanifest = "m.json"\ntokenizer = "t.json"\n')
    argv = ["train", "--config", str(config), "--set", f"run.dir='{tmp_path / 'run'}'"]
    assert main([*argv, "--nproc", "2", "--set", "run.metrics_port=65535"]) == 2
    err = capsys.readouterr().err
    assert "run.metrics_port 65535 + local rank up to 1 reaches 65536" in err and "at most 65534" in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("port", "host", "local_rank", "message"),
    [
        ("busy", "127.0.0.1", 0, r"the metrics port \d+ is in use on 127\.0\.0\.1: set run\.metrics_port to a free"),
        ("busy-1", "127.0.0.1", 1, r"the metrics port \d+ \(run\.metrics_port \+ local rank\) is in use"),
        ("free", "999.1.1.1", 0, r"run\.metrics_host '999\.1\.1\.1' cannot be resolved"),
        (65535, "127.0.0.1", 1, r"run\.metrics_port 65535 \+ local rank 1 is 65536, past the last port"),
    ],
)
def test_a_metrics_server_that_cannot_listen_names_the_setting(port, host, local_rank, message):
    import socket

    from lakehouse.errors import ConfigError
    from trainer.metrics import serve_prometheus

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        chosen = {"busy": busy, "busy-1": busy - 1, "free": free_port()}.get(port, port)
        with pytest.raises(ConfigError, match=message):
            serve_prometheus(chosen, host, local_rank)
