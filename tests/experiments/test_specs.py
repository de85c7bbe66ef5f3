"""The plain parts of experiments: specs, overrides, metrics, the noise test, provenance."""

from __future__ import annotations

import json

import pytest

from lakehouse.errors import ConfigError


def test_a_sweep_spec_reads_its_space_and_refuses_what_it_cannot_run():
    from experiments.sweep_spec import sweep_spec_from_dict

    spec = sweep_spec_from_dict(
        {
            "name": "s",
            "config": "c.toml",
            "method": "random",
            "samples": 4,
            "space": {"optim.lr": {"loguniform": [1e-4, 1e-2]}, "data.global_batch_size": [8, 16]},
            "resources": {"cpus": 2},
            "asha": {"grace_period": 1, "reduction_factor": 3},
        }
    )
    assert spec.cpus == 2 and spec.asha.reduction_factor == 3 and spec.samples == 4
    assert spec.sweep_id.startswith("s-") and spec.sweep_id == sweep_spec_from_dict(spec.to_dict()).sweep_id
    cases = [
        ({"space": {"optim.lr": {"loguniform": [1e-4, 1e-2]}}}, "needs method"),
        ({"method": "random", "space": {"optim.lr": {"loguniform": [0, 1]}}}, "low > 0"),
        ({"space": {"lr": [1, 2]}}, "section.key"),
        ({"space": {"optim.lr": []}}, "empty list"),
        ({"method": "bayes"}, "grid or random"),
        ({"colour": "red"}, "unknown key"),
        ({"resources": {"cpu": 1}}, "unknown key"),
    ]
    for extra, message in cases:
        with pytest.raises(ConfigError, match=message):
            sweep_spec_from_dict({"name": "s", "config": "c.toml", **extra})


def test_trial_overrides_are_what_factory_train_takes(tmp_path):
    from experiments.trial import TrialSetup, trial_overrides
    from trainer.config import parse_override

    setup = TrialSetup("s", "sweep", str(tmp_path), "/", "c.toml", ("train.steps=3",), 1, 1, "m.json")
    params = {"optim.lr": 0.001, "model.dim": 64, "variant": "low", "mixture.code": 0.3, "component.text": "t@1"}
    overrides = trial_overrides(setup, params, tmp_path / "runs" / "t1")
    parsed = [parse_override(o) for o in overrides]
    assert parsed == [
        ("train", "steps", 3),
        ("run", "dir", str(tmp_path / "runs" / "t1")),
        ("optim", "lr", 0.001),
        ("model", "dim", 64),
    ]


def test_a_one_rank_trial_starts_its_rank_as_torchrun_would_and_ends_as_torchrun_would(tmp_path):
    from experiments.trial import TrialSetup, trial_command

    one = TrialSetup("s", "sweep", str(tmp_path), "/", "c.toml", (), 1, 1, "m.json")
    argv, env = trial_command(one, ["train.steps=3"], resume=True)
    # No launcher: the rank itself (a second torch import spared), given torchrun's world of one.
    assert argv[1:] == ["-u", "-m", "trainer.train", "--config", "c.toml", "--set", "train.steps=3", "--resume"]
    assert env["RANK"] == env["LOCAL_RANK"] == "0" and env["WORLD_SIZE"] == "1" and env["MASTER_PORT"] == "0"
    two = TrialSetup("s", "sweep", str(tmp_path), "/", "c.toml", (), 2, 1, "m.json")
    argv, env = trial_command(two, ["train.steps=3"], resume=False)
    assert argv[1:5] == ["-m", "trainer.launch", "--nproc-per-node", "2"] and env == {}

    from trainer.launch import failed_one_rank

    # A rank that failed ends its trial's log and status as torchrun's launcher ends them.
    assert failed_one_rank(-9) == (1, ["training failed: rank 0 was killed by SIGKILL"])
    assert failed_one_rank(2) == (2, ["training failed: rank 0 exited 2"])
    assert failed_one_rank(1) == (1, ["training failed: rank 0 exited 1"])


def test_numpy_values_become_plain_toml():
    import numpy as np

    from experiments.sweep_spec import toml_literal

    assert toml_literal(np.float64(0.25)) == "0.25" and toml_literal(np.int64(3)) == "3"
    assert toml_literal(True) == "true" and toml_literal('a "b"') == '"a \\"b\\""'


def test_the_target_is_a_weighted_mean_of_held_out_losses():
    from experiments.trial import target_metric

    losses = {"code": 2.0, "text": 4.0}
    assert target_metric(losses, {}) == 3.0
    assert target_metric(losses, {"code": 3, "text": 1}) == 2.5
    assert target_metric(losses, {"code": 1, "num": 1}) is None  # a named component was not evaluated


def test_the_metrics_watcher_summarises_a_growing_log(tmp_path):
    from experiments.trial import MetricsWatcher

    log = tmp_path / "metrics.jsonl"
    watcher = MetricsWatcher(log, {})
    assert watcher.new_evaluations() == []
    lines = [
        {"step": 1, "kind": "train", "loss": 5.0},
        {"step": 1, "kind": "eval", "a": {"loss": 4.0, "ppl": 1}, "b": {"loss": 6.0, "ppl": 1}},
        {"step": 2, "kind": "train", "loss": 4.5},
        {"step": 2, "kind": "eval", "a": {"loss": 4.2, "ppl": 1}, "b": {"loss": 5.0, "ppl": 1}},
    ]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines[:2]) + '{"step": 2, "ki')  # a line half written
    first = watcher.new_evaluations()
    assert [e["target"] for e in first] == [5.0]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    second = watcher.new_evaluations()
    assert second[0]["final_loss"] == {"a": 4.2, "b": 5.0} and second[0]["best_loss"] == {"a": 4.0, "b": 5.0}
    assert second[0]["loss_curve"] == [[1, 5.0], [2, 4.5]]


def test_a_trials_summary_reads_a_manifest_relative_to_where_its_training_ran(tmp_path, monkeypatch):
    from experiments.trial import MetricsWatcher

    here, run_dir = tmp_path / "project", tmp_path / "sweep" / "runs" / "t1"
    here.mkdir()
    run_dir.mkdir(parents=True)
    _manifest().save(here / "manifest.json")
    resolved = {"data": {"manifest": "manifest.json", "global_batch_size": 4, "seq_len": 8}}
    (run_dir / "config.resolved.json").write_text(json.dumps(resolved))
    monkeypatch.chdir(tmp_path)  # a Ray worker's folder is not the one the command ran in
    summary = MetricsWatcher(run_dir / "metrics.jsonl", {}).summary(run_dir, str(here))
    assert summary["manifest_fingerprint"] == _manifest().fingerprint and summary["tokens_seen"] == 0


def test_the_noise_test_and_the_differences_by_seed():
    from experiments.ablation import analyse, format_ablation, noise_test

    assert noise_test([1.0, 1.1, 0.9], [2.0, 2.1, 1.9], 0.05)[1]
    assert not noise_test([1.0, 1.1, 0.9], [1.05, 0.95, 1.0], 0.05)[1]
    assert noise_test([1.0, 1.0], [1.0, 1.0], 0.05) == (1.0, False)  # identical runs: no difference

    def row(variant, seed, metric, status="completed"):
        return {"params": {"variant": variant, "run.seed": seed}, "metric": metric, "status": status}

    rows = [row("base", s, 1.0 + s / 10) for s in range(3)] + [row("slow", s, 2.0 + s / 5) for s in range(3)]
    reports = {r.variant: r for r in analyse(rows, 0.05)}
    assert reports["slow"].differences == pytest.approx((1.0, 1.1, 1.2))
    assert reports["slow"].difference == pytest.approx(1.1) and reports["slow"].exceeds_noise
    assert "yes" in format_ablation(list(reports.values()), 0.05)
    # A failed trial's metric is from an evaluation before it failed: a missing seed, not a measurement.
    rows[3] = row("slow", 0, 0.1, "failed")
    assert analyse(rows, 0.05)[1].metrics == pytest.approx((2.2, 2.4))
    # A variant none of whose trials completed is reported, untested, not left out.
    from experiments.ablation import UNTESTED, untested

    rows += [row("broken", s, None, "failed") for s in range(3)]
    reports = analyse(rows, 0.05)
    assert [r.variant for r in reports] == ["base", "broken", "slow"] and untested(reports) == ["broken"]
    assert UNTESTED in format_ablation(reports, 0.05).splitlines()[2]


def test_an_ablation_spec_refuses_a_variant_that_is_not_one_change():
    from experiments.ablation import AblationSpec

    with pytest.raises(ConfigError, match="seeds"):
        AblationSpec("a", "c.toml", {"v": {"optim.lr": 1.0}}, seeds=1)
    with pytest.raises(ConfigError, match="base"):
        AblationSpec("a", "c.toml", {"base": {"optim.lr": 1.0}})
    with pytest.raises(ConfigError, match=r"run\.seed"):
        AblationSpec("a", "c.toml", {"v": {"run.seed": 1}})
    spec = AblationSpec("a", "c.toml", {"v": {"optim.lr": 1.0}}, seeds=2)
    assert [t["variant"] for t in spec.trials()] == ["base", "base", "v", "v"]


def _manifest(**extra):
    from mixtures.manifest import ComponentManifest, DataFile, Manifest

    files = (DataFile("file:///x.parquet", 2, (2,), 10, 100),)
    component = ComponentManifest("a", "raw.a", 1, 1.0, files, {})
    return Manifest("m", 0, (component,), {"name": "factory"}, **extra)


def test_a_manifest_without_provenance_keeps_its_fingerprint_and_one_with_it_round_trips(tmp_path):
    from mixtures.manifest import Manifest

    plain = _manifest()
    assert "provenance" not in json.loads(plain.to_json())  # manifests pinned before keep their fingerprint
    searched = _manifest(provenance={"method": "factory mix search", "sweep_id": "s-1"})
    assert searched.fingerprint != plain.fingerprint
    searched.save(tmp_path / "m.json")
    assert Manifest.load(tmp_path / "m.json").provenance["sweep_id"] == "s-1"


def test_lineage_says_where_the_weights_came_from():
    from trainer.lineage import format_lineage

    provenance = {
        "method": "factory mix search",
        "sweep_id": "mix-abc",
        "trials": [{}] * 16,
        "fit": {"model": "quadratic", "cv_spearman": 0.91},
        "target": {"code": 1.0},
    }
    lineage = {
        "manifest": {"path": "m.json", "fingerprint": "sha256:0", "provenance": provenance},
        "tokenizer": {"path": "t.json", "sha256": "0" * 64},
        "loader_position": {"next_global_batch": 1, "sequences": 8, "tokens": 256},
        "components": [],
    }
    text = format_lineage(lineage)
    assert "weights from factory mix search mix-abc; 16 proxy trials; fit quadratic" in text
    assert "Spearman 0.910" in text


def test_the_ranking_puts_the_best_first_and_failures_last():
    from experiments.report import format_ranking

    rows = [
        {"trial_id": "t1", "status": "completed", "metric": 3.0, "params": {"optim.lr": 0.1}, "final_loss": {"a": 3}},
        {"trial_id": "t2", "status": "failed", "metric": None, "params": {"optim.lr": 9.0}, "error": "boom"},
        {"trial_id": "t3", "status": "completed", "metric": 2.0, "params": {"optim.lr": 0.01}, "final_loss": {"a": 2}},
    ]
    lines = format_ranking(rows).splitlines()
    assert [line.split()[1] for line in lines[1:4]] == ["t3", "t1", "t2"]
    assert lines[-1].strip() == "t2 failed: boom"


# --- every bad value of a spec is a ConfigError naming its key, before Ray or any trial starts ----


def _from_dict(kind):
    from experiments.ablation import ablation_spec_from_dict
    from experiments.mixture_search import search_spec_from_dict
    from experiments.sweep_spec import sweep_spec_from_dict

    return {"sweep": sweep_spec_from_dict, "ablation": ablation_spec_from_dict, "search": search_spec_from_dict}[kind]


def _spec(kind, **keys):
    """A spec of ``kind`` from the minimal valid keys and ``keys``."""
    data = {"name": "s", "config": "c.toml", **({"variants": {"v": {"optim.lr": 0.1}}} if kind == "ablation" else {})}
    return _from_dict(kind)({**data, **keys})


@pytest.mark.parametrize("kind", ["sweep", "ablation", "search"])
@pytest.mark.parametrize("value", ["train.steps=2", ["train.steps"], ["=2"], [3], {"train": 2}])
def test_set_is_a_list_of_section_key_value_strings(kind, value):
    with pytest.raises(ConfigError, match=rf"the {kind} spec: (each item of )?set must be"):
        _spec(kind, set=value)
    assert _spec(kind, set=["train.steps=2", 'run.dir="x"']).set == ("train.steps=2", 'run.dir="x"')


NUMBERS = [
    ("ablation", "nproc", 0, r"the ablation spec: nproc must be an integer >= 1, got 0\Z"),
    ("ablation", "nproc", "2", r"nproc must be an integer >= 1, got '2'"),
    ("ablation", "seeds", "3", r"seeds must be an integer >= 2"),
    ("ablation", "alpha", "0.05", r"alpha must be a number in \(0, 1\), got '0.05'"),
    ("ablation", "alpha", 1, r"alpha must be a number in \(0, 1\), got 1"),
    ("search", "nproc", 0, r"the search spec: nproc must be an integer >= 1, got 0\Z"),
    ("search", "nproc", 1.0, r"nproc must be an integer >= 1, got 1.0"),
    ("search", "seed", -1, r"seed must be an integer >= 0, got -1"),
    ("search", "folds", -3, r"folds must be an integer >= 0 other than 1 \(0: leave one out\), got -3"),
    ("search", "folds", 1, r"folds must be an integer >= 0 other than 1"),
    ("search", "trials", "16", r"trials must be an integer >= 6"),
    ("search", "candidates", "many", r"candidates must be an integer >= 100, got 'many'"),
    ("search", "top", "10", r"top must be an integer >= 1, got '10'"),
    ("search", "concentration", "1", r"concentration must be a number > 0, got '1'"),
    ("search", "concentration", float("inf"), r"concentration must be a number > 0"),
    ("search", "min_weight", "0.1", r"min_weight must be a number in \[0, 0.5\), got '0.1'"),
    ("sweep", "nproc", 0, r"the sweep spec: nproc must be an integer >= 1, got 0\Z"),
    ("sweep", "seed", "0", r"seed must be an integer >= 0, got '0'"),
]


@pytest.mark.parametrize(("kind", "key", "value", "message"), NUMBERS)
def test_numbers_are_of_their_kind_and_in_range(kind, key, value, message):
    with pytest.raises(ConfigError, match=message):
        _spec(kind, **{key: value})


def test_the_search_takes_the_numbers_it_documents():
    spec = _spec("search", nproc=2, seed=0, folds=0, trials=6, candidates=10, top=10, concentration=2, min_weight=0)
    assert (spec.folds, spec.top, spec.candidates) == (0, 10, 10)
    assert _spec("search", folds=2).folds == 2 and _spec("ablation", alpha=0.1, seeds=2).alpha == 0.1


@pytest.mark.parametrize("kind", ["sweep", "ablation", "search"])
def test_target_weights_are_checked_alike_in_every_spec(kind):
    with pytest.raises(ConfigError, match=rf"the {kind} spec: target\.code must be a number >= 0, got -1"):
        _spec(kind, target={"code": -1})
    with pytest.raises(ConfigError, match=r"target\.code must be a number >= 0, got '1'"):
        _spec(kind, target={"code": "1"})
    with pytest.raises(ConfigError, match=r"target: the weights sum to zero"):
        _spec(kind, target={"code": 0})
    with pytest.raises(ConfigError, match=r"target must be a table"):
        _spec(kind, target="code")
    assert dict(_spec(kind, target={"code": 2, "text": 0}).target) == {"code": 2, "text": 0}


@pytest.mark.parametrize(
    ("asha", "message"),
    [
        ({"grace_period": "1"}, r"the sweep spec: asha\.grace_period must be an integer >= 1, got '1'"),
        ({"reduction_factor": 1.5}, r"asha\.reduction_factor must be an integer >= 2, got 1.5"),
        ("on", r"asha must be a table, got 'on'"),
        ({"grace": 1}, r"\[asha\]: unknown key"),
    ],
)
def test_asha_refuses_values_of_another_type(asha, message):
    with pytest.raises(ConfigError, match=message):
        _spec("sweep", asha=asha)


@pytest.mark.parametrize("kind", ["sweep", "ablation", "search"])
@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"cpus": "two"}, r"resources\.cpus must be a number > 0, got 'two'"),
        ({"cpus": 0}, r"resources\.cpus must be a number > 0, got 0"),
        ({"gpus": "1"}, r"resources\.gpus must be a number >= 0, got '1'"),
        ({"gpus": -1}, r"resources\.gpus must be a number >= 0, got -1"),
        (4, r"resources must be a table, got 4"),
    ],
)
def test_resources_are_numbers(kind, resources, message):
    with pytest.raises(ConfigError, match=rf"the {kind} spec: {message}"):
        _spec(kind, resources=resources)
    assert (_spec(kind, resources={"cpus": 2, "gpus": 1}).cpus, _spec(kind).gpus) == (2.0, 0.0)


@pytest.mark.parametrize("kind", ["sweep", "ablation", "search"])
@pytest.mark.parametrize("name", ["../up", "a b", "", "-x", "n" * 65, 5])
def test_a_spec_name_is_a_safe_folder_name(kind, name):
    with pytest.raises(ConfigError, match=rf"the {kind} spec: name must be letters, digits"):
        _spec(kind, name=name)
    assert _spec(kind, name="lr_sweep-2.a").name == "lr_sweep-2.a"


def test_space_mixture_values_are_whole_weight_vectors():
    with pytest.raises(ConfigError, match=r"space\.mixture must be a table \{component = weight\}, got 0.5"):
        _spec("sweep", space={"mixture": [0.5]})
    with pytest.raises(ConfigError, match=r"space\.mixture\.code must be a number >= 0"):
        _spec("sweep", space={"mixture": [{"code": -1}]})
    with pytest.raises(ConfigError, match=r"space\.mixture: whole weight vectors are a list"):
        _spec("sweep", method="random", space={"mixture": {"uniform": [0, 1]}})


def test_valid_specs_keep_their_ids():
    """The ids hash the specs' fields: the checks change none of them (these ids are from before)."""
    from experiments.ablation import AblationSpec

    assert _spec("sweep").sweep_id == "s-f35f605aeb"
    random = {"method": "random", "samples": 4, "set": ["train.steps=2"], "target": {"a": 1}, "resources": {"cpus": 2}}
    space = {"optim.lr": {"loguniform": [1e-4, 1e-2]}, "mixture": [{"a": 1, "b": 2}]}
    assert _spec("sweep", **random, asha={"grace_period": 2}, space=space).sweep_id == "s-03b561e2e6"
    ablation = {"seeds": 4, "set": ["train.steps=3"], "target": {"a": 2}, "alpha": 0.1, "resources": {"gpus": 1}}
    assert _spec("ablation", **ablation).ablation_id == "s-f47c0b23ef"
    assert AblationSpec("a", "c.toml", {"v": {"optim.lr": 1.0}}, seeds=2).ablation_id == "a-da782948a5"


# --- checked against the base config and manifest, before Ray starts -------------------------------


def _base(tmp_path, components=("code", "text")) -> str:
    """A base training config (path) whose data.manifest has ``components``."""
    from mixtures.manifest import ComponentManifest, DataFile, Manifest

    files = (DataFile("file:///x.parquet", 2, (2,), 10, 100),)
    parts = tuple(ComponentManifest(n, f"raw.{n}", 1, 1 / len(components), files, {}) for n in components)
    Manifest("m", 0, parts, {"name": "factory"}).save(tmp_path / "manifest.json")
    config = tmp_path / "train.toml"
    config.write_text(f'[data]\nmanifest = "{tmp_path / "manifest.json"}"\ntokenizer = "unused"\n')
    return str(config)


@pytest.fixture
def no_ray(factory_home, monkeypatch):
    """Starting Ray (or its trials) fails the test: every check must come first."""
    import experiments.sweep

    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the spec was refused")

    monkeypatch.setattr(experiments.sweep, "run_trials", refuse)
    monkeypatch.setattr(experiments.sweep, "ray_session", refuse)


SPACES = [
    ({"optim.lrr": [0.001]}, r"space \(optim\.lrr = 0\.001\): \[optim\]: unknown key\(s\) lrr"),
    ({"optim.lr": [0.01, -1]}, r"space \(optim\.lr = -1\): optim\.lr must be > 0"),
    ({"data.global_batch_size": [8, 6]}, r"global_batch_size 6 must divide by the number of ranks 4"),
    # Each value passes alone; together they do not (a head of 40 / 8 = 5 is odd).
    ({"model.dim": [64, 40], "model.n_heads": [4, 8]}, r"model\.dim = 40, model\.n_heads = 8\): model head size"),
    ({"optim.lr": {"uniform": [0.0, 0.1]}}, r"space \(optim\.lr = 0\.0\): optim\.lr must be > 0"),
    (
        {"optim.lr": {"choice": [0.01, "fast"]}},
        r'optim\.lr = "fast"\): optim\.lr must be a finite number, got \'fast\'',
    ),
    ({"model.n_heads": {"randint": [1, 4]}}, r"model\.n_heads = 3\): model\.dim 64 must divide by n_heads 3"),
    ({"mixture.cdoe": [1.0]}, r"space\.mixture\.cdoe: unknown component\(s\) cdoe; the base manifest's: code, text"),
    ({"mixture": [{"code": 1, "txet": 1}]}, r"space\.mixture: unknown component\(s\) txet"),
    ({"component.txet": ["raw.t@1"]}, r"space\.component\.txet: unknown component\(s\) txet"),
]


@pytest.mark.parametrize(("space", "message"), SPACES)
def test_a_sweep_space_is_checked_against_the_base_config_before_ray_starts(tmp_path, no_ray, space, message):
    from experiments.sweep import run_sweep

    method = "grid" if all(isinstance(v, list) for v in space.values()) else "random"
    spec = _spec("sweep", config=_base(tmp_path), space=space, method=method, nproc=4)
    with pytest.raises(ConfigError, match=message):
        run_sweep(spec)


def test_a_valid_space_passes_and_an_unreadable_manifest_is_left_to_the_trials(tmp_path, factory_home):
    from experiments.sweep import prepare_setup, space_checks

    config = _base(tmp_path)
    space = {"optim.lr": {"loguniform": [1e-4, 1e-2]}, "model.dim": [32, 64], "mixture.code": [0.5], "variant": ["x"]}
    checks = space_checks(space)
    assert {label for label, _ in checks} >= {"space.mixture.code", "space (optim.lr = 0.0001, model.dim = 32)"}
    setup = prepare_setup("s-1", "sweep", config, ["train.steps=2"], target={"code": 1}, trials=checks)
    assert setup.base_manifest == str(tmp_path / "manifest.json")
    (tmp_path / "manifest.json").unlink()  # the target's names cannot be checked: the trials say why
    assert prepare_setup("s-1", "sweep", config, [], target={"nope": 1}, trials=checks).sweep_id == "s-1"


def test_a_sweep_target_names_components_of_the_base_manifest(tmp_path, no_ray):
    from experiments.sweep import run_sweep

    spec = _spec("sweep", config=_base(tmp_path), target={"code": 1, "cdoe": 1})
    with pytest.raises(ConfigError, match=r"target: unknown component\(s\) cdoe; the base manifest's: code, text"):
        run_sweep(spec)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"variants": {"low": {"optim.lrr": 0.001}}}, r"variants\.low: \[optim\]: unknown key\(s\) lrr"),
        ({"variants": {"v": {"model.dim": "wide"}}}, r"variants\.v: model\.dim must be an integer, got 'wide'"),
        ({"variants": {"v": {"mixture.cdoe": 2.0}}}, r"variants\.v: unknown component\(s\) cdoe"),
        ({"target": {"txet": 1}}, r"target: unknown component\(s\) txet"),
        ({"set": ["optim.lrr=1"]}, r"\[optim\]: unknown key\(s\) lrr"),
        ({"set": ["optim.lr=0.01"], "nproc": 3}, r"global_batch_size 8 must divide by the number of ranks 3"),
    ],
)
def test_ablation_variants_are_checked_against_the_base_config_before_ray_starts(tmp_path, no_ray, extra, message):
    from experiments.ablation import run_ablation

    with pytest.raises(ConfigError, match=message):
        run_ablation(_spec("ablation", config=_base(tmp_path), **extra))


def test_a_min_weight_whose_floors_exceed_the_mixture_is_refused_before_ray_starts(tmp_path, no_ray):
    from experiments.mixture_search import plan_search, run_search

    config = _base(tmp_path, ("a", "b", "c", "d", "e"))
    with pytest.raises(ConfigError, match=r"min_weight 0.3 × 5 components is 1.5: .* below 0.2\Z"):
        run_search(_spec("search", config=config, min_weight=0.3))
    with pytest.raises(ConfigError, match=r"min_weight 0.2 × 5 components is 1:"):  # every draw the same mixture
        run_search(_spec("search", config=config, min_weight=0.2))
    plan = plan_search(_spec("search", config=config, min_weight=0.19))
    assert list(plan.shares) == ["a", "b", "c", "d", "e"]
    with pytest.raises(ConfigError, match=r"target: unknown component\(s\) f"):
        run_search(_spec("search", config=config, target={"f": 1}))


def test_factory_mix_search_checks_its_base_config_before_ray_starts(tmp_path, no_ray, capsys):
    from factory_cli.main import run_command

    spec = tmp_path / "search.toml"
    spec.write_text(f'name = "mix"\nconfig = "{_base(tmp_path)}"\nset = ["optim.lrr=0.1"]\n')
    assert run_command("mix", ["search", str(spec), "--output", str(tmp_path / "m.json")]) == 2
    assert "error: [optim]: unknown key(s) lrr" in capsys.readouterr().err
    spec.write_text(f'name = "mix"\nconfig = "{tmp_path / "missing.toml"}"\n')
    assert run_command("mix", ["search", str(spec), "--output", str(tmp_path / "m.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_factory_ablate_names_its_spec_file_in_every_refusal(tmp_path, factory_home):
    """A variant's unknown key was refused as `error: variants.a: …`, without the file that its
    other refusals name."""
    from tests.conftest import run_factory

    spec = tmp_path / "abl.toml"
    spec.write_text(f'name = "lr"\nconfig = "{_base(tmp_path)}"\nseeds = 2\n[variants.a]\n"optim.lrr" = 0.1\n')
    done = run_factory("ablate", str(spec))
    assert done.returncode == 2 and f"error: {spec}: variants.a: [optim]: unknown key(s) lrr" in done.stderr, (
        done.stderr[-2000:]
    )
