"""A two-source factory on real Spark, Iceberg, Ray Tune, torchrun and Dagster, built once for
this module by `factory run` (both sources refined, the first snapshots promoted, the mixture
searched, a run trained and evaluated), then:

- run again: a no-op;
- a planted candidate that is clearly worse (half its documents replaced with noise): the
  refinement gate refuses it after a paired ablation, and training keeps the old snapshot;
- the real Dagster daemon runs it, with nobody calling a `factory` command: new files appear in
  one source, its sensor ingests and refines them, and the gate ablates; the daemon is killed,
  with every process it started, just before the gate records its decision, and started again:
  the run is found dead, retried, and the decision is recorded exactly once; the mixture is
  searched again, warm-started, the next run trains on it and the checkpoint sensor evaluates it;
- a declared ablation that wins, plain or as a ladder of sizes: its decision changes its run's next
  run and not the one it ran on; the ladder runs again when the run's config changes, and only then.

The tests only read the tables and the factory's files."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from lakehouse.decisions import read_decisions
from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema
from orchestration.definition import FactoryDefinition
from orchestration.definition_load import load_definition
from orchestration.layout import mixture_folder, read_current, run_folder
from orchestration.state import PRODUCTION, head, tagged
from tests.conftest import REPO, run_factory
from tests.orchestration.definitions import DEMO_TRAIN, code_files, two_sources, web_records

pytestmark = [pytest.mark.engine, pytest.mark.slow]

TINY = ["train.steps=4", "eval.every=4", "eval.batches=1", "checkpoint.every=4", "data.global_batch_size=4",
        "data.seq_len=64", "data.num_shards=1", "optim.warmup_steps=1"]  # fmt: skip
# The gate's proxies train a little longer: 8 steps tell half-noise data from clean data by far.
PROXY = ["train.steps=8", "eval.every=8", "eval.batches=1", "checkpoint.every=8", "data.global_batch_size=4",
         "data.seq_len=64", "data.num_shards=1", "optim.warmup_steps=2"]  # fmt: skip
# Each search proxy, gate proxy and ablation trial reserves the default one Ray CPU, so 2 run at once
# on a 2-core machine: a trial's rank starts without torchrun and keeps its core busy, so more at once
# only add Ray workers and contention (docs/development.md has the figures).
DEFINITION = f"""
[mixtures.searched]
components = ["code", "web"]
heldout_documents = 4
search = {{ config = "{DEMO_TRAIN}", trials = 6, set = {json.dumps(TINY)}, candidates = 200, top = 20 }}

[runs.small]
config = "{DEMO_TRAIN}"
mixture = "searched"
set = {json.dumps(TINY)}

[evals.loss]
suites = ["heldout"]
cadence = "checkpoint"

[policies.refinement_gate]
enabled = true
config = "{DEMO_TRAIN}"
set = {json.dumps(PROXY)}
seeds = 3

[policies.mixture_redetermination]
enabled = true
"""


INSTANCE = """
run_launcher:
  module: orchestration.launcher
  class: LocalRunLauncher
run_monitoring:
  enabled: true
  poll_interval_seconds: 3
run_retries:
  enabled: true
  max_retries: 2
  retry_on_asset_or_op_failure: false
telemetry:
  enabled: false
"""


class Daemon:
    """`dagster-daemon run -m orchestration.definitions` in a session of its own."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        with log.open("a") as out:
            out.write(f"\n==== daemon started at {time.strftime('%X')} ====\n")
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-m", "orchestration.definitions"],
            cwd=REPO, env=env, stdout=log.open("a"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL the daemon and every process under it (code server, run workers, their commands,
        torchrun, Ray): a machine that lost power, as far as these processes can tell."""
        for _ in range(3):
            for pid in [*_descendants(self.proc.pid), self.proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        self.proc.wait(timeout=30)

    def tail(self, lines: int = 80) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def wait_for(what: str, check: Callable[[], object], daemon: Daemon, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if daemon.proc.poll() is not None:
            pytest.fail(f"the daemon exited ({daemon.proc.returncode}) while waiting for {what}:\n{daemon.tail()}")
        time.sleep(2)
    runs = dagster_runs(Path(daemon.env["DAGSTER_HOME"]))
    pytest.fail(f"no {what} after {timeout:.0f} s; Dagster's runs:\n{runs}\nthe daemon's log ends:\n{daemon.tail()}")


def dagster_runs(home: Path, newest: int = 8) -> str:
    """The newest runs of the instance in ``home``: status, retry tags, and what their event logs say
    of retries (run retries are Dagster's daemon's work, which the daemon's own log barely shows)."""
    from dagster import DagsterInstance

    lines = []
    with DagsterInstance.from_config(str(home)) as instance:
        for run in instance.get_runs(limit=newest):
            tags = {k: v for k, v in run.tags.items() if "retry" in k or "failure" in k}
            lines.append(f"{run.run_id[:8]} {run.job_name} {run.status.value} {tags}")
            for entry in instance.all_logs(run.run_id):
                if "etry" in (entry.message or "") or "Marking run" in (entry.message or ""):
                    lines.append(f"    {entry.message[:300]}")
                    error = getattr(entry.dagster_event and entry.dagster_event.event_specific_data, "error", None)
                    lines += [f"    {error.to_string()[-1500:]}"] if error is not None else []
    return "\n".join(lines)


@dataclass
class Factory:
    folder: Path
    definition: FactoryDefinition
    home: Path
    catalog: object
    first: dict  # the first run's current record


def evaluated_run(factory: Factory) -> dict | None:
    """The run's current folder once its last checkpoint's eval rows are in evals.results."""
    from evals.results import checkpoint_results

    record = read_current(run_folder(factory.definition, "small"))
    if record is None:
        return None
    final = Path(record["run_dir"]) / "checkpoints" / "step-4"
    return record if (final / "COMPLETE").exists() and checkpoint_results(factory.catalog, str(final)) else None


@pytest.fixture(scope="module")
def factory(spark, tmp_path_factory) -> Factory:
    from factory_cli.run import materialise
    from lakehouse.catalog import load_catalog

    root = tmp_path_factory.mktemp("factory")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FACTORY_HOME", str(root / "home"))
        patch.delenv("FACTORY_CATALOG", raising=False)
        folder = root / "factory"
        code_files(folder / "code", 0, 16)
        web_records(folder / "web", "part-0.jsonl", 0, 30)
        definition = load_definition(two_sources(folder, runs=DEFINITION))
        materialise(definition)
        built = Factory(folder, definition, root / "home", load_catalog(), {})
        built.first = evaluated_run(built)
        yield built


@pytest.fixture
def in_factory(factory: Factory, monkeypatch: pytest.MonkeyPatch) -> Factory:
    monkeypatch.setenv("FACTORY_HOME", str(factory.home))
    monkeypatch.delenv("FACTORY_CATALOG", raising=False)
    return factory


def snapshots(catalog) -> dict[str, int]:
    return {
        ".".join(i): len(list(catalog.load_table(i).snapshots()))
        for ns in catalog.list_namespaces()
        for i in catalog.list_tables(ns)
    }


def test_the_first_run_promotes_searches_trains_and_evaluates_then_running_again_does_nothing(in_factory):
    from factory_cli.run import materialise

    catalog, definition = in_factory.catalog, in_factory.definition
    assert in_factory.first is not None, "the first run's last checkpoint was not evaluated"
    decisions = read_decisions(catalog, factory="team")
    gates = sorted((d["subject"], d["verdict"]) for d in decisions if d["kind"] == "refinement-gate")
    assert gates == [("code", "promoted"), ("web", "promoted")]
    assert all("first snapshot" in d["reason"] for d in decisions if d["kind"] == "refinement-gate")
    for table in ("decontaminated.code", "filtered.web"):
        assert tagged(catalog, table) == head(catalog, table) is not None, table
    (search,) = [d for d in decisions if d["kind"] == "mixture"]
    assert search["verdict"] == "determined" and search["evidence"]["trials"] == 6
    mixture = read_current(mixture_folder(definition, "searched"))
    assert mixture["components"] == {
        "code": f"decontaminated.code@{tagged(catalog, 'decontaminated.code')}",
        "web": f"filtered.web@{tagged(catalog, 'filtered.web')}",
    }
    assert in_factory.first["fingerprint"] == mixture["fingerprint"] == search["after"]["fingerprint"]

    before = snapshots(catalog)
    materialise(definition)  # nothing new: every step finds its inputs taken in
    assert snapshots(catalog) == before
    assert read_current(run_folder(definition, "small")) == in_factory.first
    # The finished run was not started again: a resumed trainer logs a second "start".
    metrics = (Path(in_factory.first["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["resumed"] for line in metrics if json.loads(line)["kind"] == "start"] == [False]


def noisy(catalog, table: str) -> None:
    """Replace main of ``table`` with its documents, every second one's text turned to noise."""
    loaded = catalog.load_table(tuple(table.split(".")))
    rows = sorted(loaded.scan().to_arrow().to_pylist(), key=lambda r: r["doc_id"])
    rng = random.Random(0)
    for row in rows[::2]:
        row["text"] = "".join(rng.choice(string.ascii_lowercase + "  ") for _ in row["text"])
        row["n_bytes"] = len(row["text"])
    loaded.overwrite(pa.Table.from_pylist(rows, schema=arrow_schema(DOCUMENT_SCHEMA)))


def test_the_gate_refuses_a_clearly_worse_candidate_and_training_keeps_the_old_snapshot(in_factory):
    from factory_cli.run import materialise

    catalog, definition = in_factory.catalog, in_factory.definition
    production = tagged(catalog, "filtered.web")
    mixture = read_current(mixture_folder(definition, "searched"))
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
    assert read_current(mixture_folder(definition, "searched")) == mixture
    assert read_current(run_folder(definition, "small")) == in_factory.first


def test_the_daemon_runs_the_factory_and_a_killed_decision_is_recorded_once(in_factory, tmp_path):
    catalog, definition, folder = in_factory.catalog, in_factory.definition, in_factory.folder
    home = tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE)
    env = {**os.environ, "DAGSTER_HOME": str(home), "FACTORY_DEFINITION": str(definition.path)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    log = tmp_path / "daemon.log"
    first = in_factory.first

    # New files, and a daemon that will be killed just before the gate records its decision.
    paused = tmp_path / "paused-gate"
    paused.mkdir()
    daemon = Daemon({**env, "FACTORY_PAUSE_AT": f"gate-before-record:{paused}"}, log)
    try:
        production = tagged(catalog, "decontaminated.code")
        code_files(folder / "code", 16, 3)
        wait_for("the gate's ablation to finish", lambda: (paused / "paused").exists(), daemon, timeout=600)
        assert not [d for d in read_decisions(catalog, factory="team") if d["inputs"].get("production") == production]
        daemon.kill()

        daemon = Daemon(env, log)

        def second_run() -> dict | None:
            record = evaluated_run(in_factory)
            return record if record and record["run_dir"] != first["run_dir"] else None

        second = wait_for("the run on the re-determined mixture, evaluated", second_run, daemon, timeout=600)
    finally:
        daemon.kill()
        shutil.copy(log, Path(tempfile.gettempdir()) / "factory-test-daemon.log")  # for a look after a failure

    decisions = read_decisions(catalog, factory="team")
    ids = [d["decision_id"] for d in decisions]
    assert len(ids) == len(set(ids))
    (gate,) = [d for d in decisions if d["kind"] == "refinement-gate" and d["inputs"]["production"] == production]
    candidate = gate["inputs"]["candidate"]
    assert gate["verdict"] == "promoted" and gate["evidence"]["sweep_id"].startswith("gate-code")
    assert tagged(catalog, "decontaminated.code") == candidate == head(catalog, "decontaminated.code")
    mixtures = [d for d in decisions if d["kind"] == "mixture"]
    assert [d["verdict"] for d in mixtures] == ["determined", "determined"]
    assert mixtures[1]["inputs"]["prior"] == mixtures[0]["after"]["weights"]  # warm-started
    assert mixtures[1]["inputs"]["components"]["code"] == f"decontaminated.code@{candidate}"
    assert second["fingerprint"] == mixtures[1]["after"]["fingerprint"]
    assert read_current(mixture_folder(definition, "searched"))["decision"] == mixtures[1]["decision_id"]
    factory_json = json.loads((Path(second["run_dir"]) / "factory.json").read_text())
    assert mixtures[1]["decision_id"] in factory_json["decisions"]
    assert "Detected run worker status" in log.read_text()  # found dead by the launcher's health check
    lineage = run_factory("lineage", second["run_dir"], "--json")
    assert lineage.returncode == 0, lineage.stderr
    shaped = {d["decision_id"] for d in json.loads(lineage.stdout)["decisions"]}
    assert {gate["decision_id"], mixtures[1]["decision_id"]} <= shaped


def adoption(run: str, ablation: str, seeds: int, ladder: str = "") -> str:
    """A run whose learning rate, 1e-5, barely moves a model in 4 steps, and an ablation of it (a
    ladder with ``ladder``) whose variant, 3e-3, does: better beyond seed noise, even at each size
    of a ladder with 2 seeds, whose paired differences vary far less than their mean. Adoption on."""
    return f"""
[runs.{run}]
config = "{DEMO_TRAIN}"
mixture = "both"
set = {json.dumps([*TINY, "optim.lr=0.00001"])}

[experiments.ablations.{ablation}]
run = "{run}"
seeds = {seeds}
variants = {{ faster = {{ "optim.lr" = 0.003 }} }}
{ladder}

[policies.ablation_adoption]
enabled = true
"""


# Two seeds, as the ladder's: each trial is deterministic, and the faster rate is better by 0.416 and
# 0.420 on seeds 0 and 1 (Welch's p = 0.008 against 0.05); a third seed only added two more trials.
ADOPTION = adoption("probe", "lr", seeds=2)


def declare(factory: Factory, name: str, extra: str) -> FactoryDefinition:
    """The factory's definition and ``extra``, in a file of its own beside it (the module's file stays
    as built, whichever test runs first)."""
    path = factory.folder / f"{name}.toml"
    path.write_text(factory.definition.path.read_text() + extra)
    return load_definition(path)


def ablation_decisions(factory: Factory, subject: str) -> list[dict]:
    return [
        d
        for d in read_decisions(factory.catalog, factory="team")
        if d["kind"] == "ablation" and d["subject"] == subject
    ]


def lr_of(run_dir: str) -> float:
    """The learning rate the run's last checkpoint trained with."""
    lineage = json.loads((Path(run_dir) / "checkpoints" / "step-4" / "lineage.json").read_text())
    return lineage["config"]["optim"]["lr"]


def test_an_ablation_that_wins_changes_its_runs_next_run_and_not_the_one_it_ran_on(in_factory):
    from factory_cli.run import materialise

    definition = declare(in_factory, "adoption", ADOPTION)
    materialise(definition, ["run/probe"])
    first = read_current(run_folder(definition, "probe"))
    materialise(definition, ["experiment/lr"])

    (decision,) = ablation_decisions(in_factory, "lr")
    assert decision["verdict"] == "adopted", decision["reason"]
    assert decision["after"]["overrides"] == ["optim.lr=0.003"] and decision["before"]["overrides"] == []
    winner = decision["evidence"]["variants"][0]
    assert winner["variant"] == "faster" and winner["difference"] < 0 and winner["p_value"] < 0.05
    materialise(definition, ["run/probe"])
    second = read_current(run_folder(definition, "probe"))
    assert second["run_dir"] != first["run_dir"] and second["overrides"][-1] == "optim.lr=0.003"
    assert decision["decision_id"] in json.loads((Path(second["run_dir"]) / "factory.json").read_text())["decisions"]
    assert lr_of(first["run_dir"]) == 0.00001  # the run it ran on keeps its config
    assert lr_of(second["run_dir"]) == 0.003
    materialise(definition, ["experiment/lr", "run/probe"])  # decided once: nothing runs again
    assert len(ablation_decisions(in_factory, "lr")) == 1
    assert read_current(run_folder(definition, "probe")) == second


LADDER = adoption(
    "rungs",
    "lr_ladder",
    seeds=2,
    ladder='ladder = { sizes = { tiny = { "model.dim" = 64 }, wide = { "model.dim" = 128 } } }',
)


def experiments_requested(definition: FactoryDefinition) -> list[str]:
    """The jobs the daemon's experiment sensor would start now."""
    import dagster as dg

    from orchestration.graph import build_definitions

    defs = build_definitions(definition)
    sensor = next(s for s in defs.sensors if s.name == "experiment_sensor")
    with dg.DagsterInstance.ephemeral() as instance:
        return [r.job_name for r in sensor(dg.build_sensor_context(instance=instance, definitions=defs)).run_requests]


def test_a_declared_ladder_runs_when_added_or_its_base_changes_and_its_adoption_changes_the_next_run(in_factory):
    from experiments.trials_table import read_trials
    from factory_cli.run import materialise

    catalog = in_factory.catalog
    definition = declare(in_factory, "ladder", LADDER)
    materialise(definition, ["run/rungs"])
    first = read_current(run_folder(definition, "rungs"))
    assert experiments_requested(definition) == ["experiment_lr_ladder"]  # added: the daemon would start it
    materialise(definition, ["experiment/lr_ladder"])

    (decision,) = ablation_decisions(in_factory, "lr_ladder")
    assert decision["verdict"] == "adopted", decision["reason"]
    assert "faster" in decision["reason"] and "at every size" in decision["reason"]
    assert decision["before"]["overrides"] == [] and decision["after"]["overrides"] == ["optim.lr=0.003"]
    evidence = decision["evidence"]
    (faster,) = evidence["variants"]
    assert faster["variant"] == "faster" and faster["verdict"] == "adopt"
    assert [s["size"] for s in faster["sizes"]] == ["tiny", "wide"]
    for size in faster["sizes"]:
        assert size["outcome"] == "better" and size["compute"] == "equal steps", size
        assert len(size["base"]) == len(size["candidate"]) == 2
        assert size["difference"] < 0 and size["interval"][1] < 0 and size["p_value"] < 0.05
    trials = read_trials(catalog, evidence["sweep_id"])  # the ladder ran: 2 variants x 2 sizes x 2 seeds
    assert len(trials) == 8 and {t["kind"] for t in trials} == {"ladder"}
    assert sorted(evidence["runs"]) == sorted(t["run_dir"] for t in trials)

    # Nothing changed: the daemon starts nothing, and materialising it again decides nothing.
    assert experiments_requested(definition) == []
    before = snapshots(catalog)
    materialise(definition, ["experiment/lr_ladder"])
    assert ablation_decisions(in_factory, "lr_ladder") == [decision] and snapshots(catalog) == before

    # The adoption shapes the run's next run; the one it ran on keeps its config.
    materialise(definition, ["run/rungs"])
    second = read_current(run_folder(definition, "rungs"))
    assert second["run_dir"] != first["run_dir"] and second["overrides"][-1] == "optim.lr=0.003"
    assert decision["decision_id"] in json.loads((Path(second["run_dir"]) / "factory.json").read_text())["decisions"]
    assert (lr_of(first["run_dir"]), lr_of(second["run_dir"])) == (0.00001, 0.003)

    # The run's config changes (the winner written into it): the ladder runs again on the new base,
    # where the variant is the base itself, and the adoption decided on the old base no longer applies.
    changed = declare(in_factory, "ladder", LADDER.replace('"optim.lr=0.00001"', '"optim.lr=0.003"'))
    assert experiments_requested(changed) == ["experiment_lr_ladder"]
    materialise(changed, ["experiment/lr_ladder"])
    (again,) = [d for d in ablation_decisions(in_factory, "lr_ladder") if d["decision_id"] != decision["decision_id"]]
    assert again["verdict"] == "inconclusive" and again["inputs"]["base_config"] != decision["inputs"]["base_config"]
    assert again["before"]["overrides"] == again["after"]["overrides"] == []
    (same,) = again["evidence"]["variants"]
    assert same["verdict"] == "inconclusive" and all(s["differences"] == [0.0, 0.0] for s in same["sizes"])
    assert len(read_trials(catalog, again["evidence"]["sweep_id"])) == 8
    assert again["evidence"]["sweep_id"] != evidence["sweep_id"] and experiments_requested(changed) == []
