"""A factory definition is read as strictly as the other configs, and gives Dagster a graph with
each source's own assets: nothing named after the demo."""

from __future__ import annotations

import os
import re

import pytest

from lakehouse.errors import ConfigError
from orchestration.definition_load import load_definition
from orchestration.graph import build_definitions
from tests.conftest import REPO, run_factory
from tests.orchestration.definitions import two_sources, web_records


def keys(definition) -> set[str]:
    return {k.to_user_string() for k in build_definitions(definition).resolve_all_asset_keys()}


def test_a_two_source_file_gives_each_source_its_own_chain(tmp_path):
    definition = load_definition(two_sources(tmp_path))
    found = keys(definition)
    assert {"code/raw", "code/dedup", "code/filtered", "code/decontaminated", "code/production"} <= found
    assert {"web/raw", "web/filtered", "web/production"} <= found
    assert "web/dedup" not in found  # dedup = false
    assert {"tokenizer", "mixture/both", "run/small", "checkpoints/small", "evals/loss"} <= found
    assert not [k for k in found if "demo" in k]
    defs = build_definitions(definition)
    assert {j.name for j in defs.jobs} >= {"code_refresh", "code_refine", "web_refresh", "evaluate_loss"}
    assert {s.name for s in defs.sensors} == {"code_sensor", "web_sensor", "checkpoint_sensor"}
    # Dagster refuses, at each tick, a request for a job its sensor does not name.
    targets = {s.name: {t.job_name for t in s.targets} for s in defs.sensors}
    assert targets["code_sensor"] == {"code_refresh", "code_refine"}
    assert definition.sources["code"].final_table == "decontaminated.code"
    assert definition.sources["web"].final_table == "filtered.web"


def test_the_shipped_definitions_load(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_ROOT", str(tmp_path))
    demo = load_definition(REPO / "configs" / "demo-factory.toml")
    assert demo.sources["text"].inputs[1].include == ("copyright", "*.txt", "*.md", "README")
    example = load_definition(REPO / "configs" / "example-factory.toml")
    assert set(example.sources) == {"web", "code", "text"} and example.mixtures["main"].search["trials"] == 32
    assert example.sources["code"].inputs[0].paths == (f"{tmp_path}/repos",)
    assert not [k for k in keys(example) if "demo" in k]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("[tokenizer]", "[tokenizer]\nvocab = 300"), r"tokenizer: unknown key\(s\) vocab"),
        (('format = "jsonl"', 'format = "jsonl"\nformt = 1'), r"sources\.web: unknown key\(s\) formt"),
        (("code = 0.5, web", "code = 0.5, books"), r"mixtures\.both\.weights: unknown source\(s\) books"),
        (('mixture = "both"', 'mixture = "other"'), r"runs\.small\.mixture: unknown mixture\(s\) other"),
        (('"train.steps=4"', '"train.stepz=4"'), r"runs\.small\.config: .*unknown key\(s\) stepz"),
        (('filter = "docs"', 'filter = "nope"'), r"sources\.web\.filter: "),
        (('decontaminate = ["humaneval"]', 'decontaminate = ["mbpp"]'), r"unknown eval set\(s\) mbpp"),
        (('paths = ["web"]', 'paths = ["${NO_SUCH_VARIABLE}/web"]'), r"\$\{NO_SUCH_VARIABLE\} is not set"),
        (('name = "team"', 'name = "Team-1"'), r"^.*: name: give a name"),
        (('suites = ["heldout"]', 'suites = ["heldout", "mmlu"]'), r"evals\.loss\.suites: unknown suite\(s\) mmlu"),
        (("dedup = false", "dedup = { threshold = 2.0 }"), r"sources\.web\.dedup: threshold must be between"),
        (
            ("weights = { code = 0.5, web = 0.5 }", ""),
            r"mixtures\.both: give `weights` \(fixed\) or `search` \(searched\)",
        ),
    ],
)
def test_bad_keys_and_references_are_refused_naming_the_key_and_the_file(tmp_path, edit, message):
    path = two_sources(tmp_path)
    old, new = edit
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError, match=message) as raised:
        load_definition(path)
    assert str(raised.value).startswith(str(path))


def test_experiments_and_policies_are_checked_by_their_own_specs(tmp_path):
    gate = """
[policies.refinement_gate]
enabled = true
"""
    with pytest.raises(ConfigError, match=r"policies\.refinement_gate\.config: give the proxies' training config"):
        load_definition(two_sources(tmp_path, gate=gate))
    ablation = """
[experiments.ablations.lr]
run = "small"
seeds = 1
variants = { low = { "optim.lr" = 0.001 } }
"""
    with pytest.raises(
        ConfigError, match=r"experiments\.ablations\.lr: the ablation spec: seeds must be an integer >= 2"
    ):
        load_definition(two_sources(tmp_path, extra=ablation))
    search = """
[mixtures.searched]
components = ["code", "web"]
search = { config = "%s", trials = 3 }
""" % (REPO / "configs" / "demo-train.toml")
    with pytest.raises(ConfigError, match=r"mixtures\.searched\.search: .*trials must be an integer >= 6"):
        load_definition(two_sources(tmp_path, extra=search))


def test_factory_run_refuses_a_bad_file_with_exit_2(tmp_path):
    path = two_sources(tmp_path)
    path.write_text(path.read_text().replace("[tokenizer]", "[tokenizer]\nvocab = 300"))
    result = run_factory("run", str(path))
    assert result.returncode == 2, result.stderr
    assert re.search(rf"^error: {re.escape(str(path))}: tokenizer: unknown key\(s\) vocab", result.stderr, re.M)
    listed = run_factory("run", str(two_sources(tmp_path / "ok")), "--list")
    assert listed.returncode == 0, listed.stderr
    assert "code/production" in listed.stdout and "evals/loss" in listed.stdout


@pytest.mark.parametrize(
    ("extra", "gate", "message"),
    [
        ("", 'config = "%s"\nresources = { cpus = -1 }', r"refinement_gate: resources\.cpus must be a number > 0"),
        ("", 'config = "%s"\nresources = { cpu = 2 }', r"refinement_gate: resources: unknown key\(s\) cpu; allowed"),
        ("", 'config = "%s"\nresources = 2', r"refinement_gate: resources must be a table"),
        ("", 'config = "%s"\ntarget = { web = "x" }', r"refinement_gate: target\.web must be a number >= 0"),
        ('[mixtures.searched]\ncomponents = ["code", "web"]\nsearch = { config = "%s", set = ["optim.lrr=1"] }', "",
         r"mixtures\.searched\.search\.config: .*unknown key\(s\) lrr"),
        ('[experiments.ablations.lr]\nrun = "small"\nseeds = 2\nset = ["train.compile=\'yes\'"]\n'
         'variants = { low = { "optim.lr" = 0.001 } }', "", r"experiments\.ablations\.lr\.set: .*train\.compile must be"),
    ],
)  # fmt: skip
def test_values_that_would_fail_a_policy_or_an_experiment_later_are_refused_now(tmp_path, extra, gate, message):
    config = REPO / "configs" / "demo-train.toml"
    gate = f"[policies.refinement_gate]\n{gate % config}\n" if gate else ""
    extra = extra % config if "%s" in extra else extra
    with pytest.raises(ConfigError, match=message):
        load_definition(two_sources(tmp_path, extra=extra, gate=gate))


def test_a_filter_config_path_expands_variables_from_the_definitions_folder(tmp_path, monkeypatch):
    folder = tmp_path / "filters"
    folder.mkdir()
    (folder / "web.toml").write_text((REPO / "quality" / "configs" / "docs.toml").read_text())
    monkeypatch.setenv("FILTERS", str(folder))
    path = two_sources(tmp_path)
    path.write_text(path.read_text().replace('filter = "docs"', 'filter = "${FILTERS}/web.toml"', 1))
    assert load_definition(path).sources["web"].filter == str(folder / "web.toml")


def _config_without_data(folder) -> str:
    """configs/demo-train.toml without data.manifest and data.tokenizer, as docs/factory.md allows."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (REPO / "configs" / "demo-train.toml").read_text()
    kept = [line for line in text.splitlines() if not line.startswith(("manifest = ", "tokenizer = "))]
    path = folder / "train.toml"
    path.write_text("\n".join(kept) + "\n")
    return str(path)


def test_a_training_config_without_the_keys_the_factory_sets_loads_for_a_run_the_gate_and_a_search(tmp_path):
    config = _config_without_data(tmp_path / "configs")
    runs = f'[runs.small]\nconfig = "{config}"\nmixture = "both"\nset = ["train.steps=4"]\n'
    gate = f'[policies.refinement_gate]\nenabled = true\nconfig = "{config}"\nset = ["train.steps=2"]\n'
    extra = f"""
[mixtures.searched]
components = ["code", "web"]
search = {{ config = "{config}", trials = 6, set = ["train.steps=2"] }}

[experiments.ablations.lr]
run = "small"
seeds = 2
variants = {{ low = {{ "optim.lr" = 0.001 }} }}
"""
    definition = load_definition(two_sources(tmp_path, runs=runs, gate=gate, extra=extra))
    assert definition.runs["small"].config == config
    assert definition.policies.refinement_gate.config == config
    assert definition.mixtures["searched"].search["config"] == config
    # Every other check of the config still happens when the definition loads.
    bad = runs.replace("train.steps=4", "train.steps=0")
    with pytest.raises(ConfigError, match=r"runs\.small\.config: train\.steps must be > 0"):
        load_definition(two_sources(tmp_path / "bad", runs=bad))


@pytest.mark.parametrize(
    ("runs", "extra", "gate", "message"),
    [
        ('set = ["run.dir=/tmp/x"]', "", "", r"runs\.small\.set: run\.dir is set by the factory \(its run folder\)"),
        ('set = ["data.manifest=\'m.json\'"]', "", "", r"runs\.small\.set: data\.manifest is set by the factory"),
        ('set = [" data.tokenizer = \'t.json\'"]', "", "", r"runs\.small\.set: data\.tokenizer is set by the factory"),
        ("", "", 'set = ["eval.manifest=\'m.json\'"]', r"refinement_gate\.set: eval\.manifest is set by the factory"),
        ("", "", 'set = ["run.seed=3"]', r"refinement_gate\.set: run\.seed is set by the factory"),
        ("", '[mixtures.searched]\ncomponents = ["code", "web"]\nsearch = { config = "%s", set = ["run.dir=x"] }', "",
         r"mixtures\.searched\.search\.set: run\.dir is set by the factory"),
        ("", '[experiments.ablations.lr]\nrun = "small"\nseeds = 2\nset = ["run.seed=1"]\n'
             'variants = { low = { "optim.lr" = 0.001 } }', "", r"experiments\.ablations\.lr\.set: run\.seed is set by"),
        ("", '[experiments.sweeps.lr]\nrun = "small"\nset = ["data.tokenizer=\'t.json\'"]\n'
             'space = { "optim.lr" = [0.001, 0.01] }', "", r"experiments\.sweeps\.lr\.set: data\.tokenizer is set by"),
        ("", '[experiments.ablations.lr]\nrun = "small"\nseeds = 2\n'
             'variants = { elsewhere = { "run.dir" = "/tmp/x" } }', "",
         r"experiments\.ablations\.lr\.variants\.elsewhere: run\.dir is set by the factory .* cannot be varied"),
        ("", '[experiments.ablations.lr]\nrun = "small"\nseeds = 2\nvariants = { low = { "optim.lr" = 0.001 } }\n'
             'ladder = { sizes = { a = { "model.dim" = 64 }, b = { "model.dim" = 128, "data.manifest" = "m.json" } } }',
         "", r"experiments\.ablations\.lr\.ladder\.sizes\.b: data\.manifest is set by the factory"),
        ("", '[experiments.sweeps.lr]\nrun = "small"\nspace = { "data.tokenizer" = ["a.json", "b.json"] }', "",
         r"experiments\.sweeps\.lr\.space: data\.tokenizer is set by the factory"),
    ],
)  # fmt: skip
def test_a_set_of_a_key_the_factory_sets_is_refused(tmp_path, runs, extra, gate, message):
    config = REPO / "configs" / "demo-train.toml"
    runs = f'[runs.small]\nconfig = "{config}"\nmixture = "both"\n{runs}\n'
    gate = f'[policies.refinement_gate]\nconfig = "{config}"\n{gate}\n' if gate else ""
    extra = extra % config if "%s" in extra else extra
    with pytest.raises(ConfigError, match=message):
        load_definition(two_sources(tmp_path, runs=runs, extra=extra, gate=gate))


@pytest.mark.parametrize(
    ("experiment", "message"),
    [
        ('variants = { qk = { "model.qk_normm" = true } }',
         r"experiments\.ablations\.arch\.variants\.qk: .*unknown key\(s\) qk_normm"),
        ('variants = { wide = { "model.dim" = 63 } }', r"experiments\.ablations\.arch\.variants\.wide: .*model\.dim"),
        ('variants = { low = { "optim.lr" = 0.001 } }\nladder = { sizes = { a = { "model.dim" = 64 }, '
         'b = { "model.dimm" = 128 } } }', r"experiments\.ablations\.arch\.ladder\.sizes\.b: .*unknown key\(s\) dimm"),
    ],
)  # fmt: skip
def test_an_ablations_variants_and_ladder_sizes_are_checked_against_the_config_when_it_loads(
    tmp_path, experiment, message
):
    config = REPO / "configs" / "demo-train.toml"
    runs = f'[runs.small]\nconfig = "{config}"\nmixture = "both"\n'
    extra = f'[experiments.ablations.arch]\nrun = "small"\nseeds = 2\n{experiment}\n'
    with pytest.raises(ConfigError, match=message):
        load_definition(two_sources(tmp_path, runs=runs, extra=extra))


def test_a_tilde_in_a_path_is_the_users_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    config = _config_without_data(home / "configs")
    (home / "filters").mkdir()
    (home / "filters" / "web.toml").write_text((REPO / "quality" / "configs" / "docs.toml").read_text())
    runs = '[runs.small]\nconfig = "~/configs/train.toml"\nmixture = "both"\n'
    path = two_sources(tmp_path / "factory", runs=runs)
    text = path.read_text().replace('paths = ["web"]', 'paths = ["~/prose"]', 1)
    path.write_text(text.replace('filter = "docs"', 'filter = "~/filters/web.toml"', 1))
    definition = load_definition(path)
    assert definition.sources["web"].inputs[0].paths == (str(home / "prose"),)
    assert definition.sources["web"].filter == str(home / "filters" / "web.toml")
    assert definition.runs["small"].config == config


def _add_source(path, name: str, dedup: str = "") -> None:
    (path.parent / name).mkdir(exist_ok=True)
    text = path.read_text().replace(
        "[tokenizer]", f'[sources.{name}]\nformat = "files"\npaths = ["{name}"]\n{dedup}\n\n[tokenizer]'
    )
    path.write_text(text)


def test_a_source_named_as_one_of_the_factorys_tables_is_refused_naming_both(tmp_path):
    path = two_sources(tmp_path / "quarantine")
    _add_source(path, "quarantine")
    with pytest.raises(
        ConfigError, match=r"sources\.quarantine: the name 'quarantine' is the factory's own: raw\.quarant"
    ):
        load_definition(path)
    path = two_sources(tmp_path / "ingested_files")
    _add_source(path, "ingested_files")
    with pytest.raises(
        ConfigError,
        match=r"sources\.ingested_files: the name 'ingested_files' is the factory's own: raw\.ingested_files is the ledger",
    ):
        load_definition(path)
    path = two_sources(tmp_path / "clusters")
    _add_source(path, "code_clusters")
    message = (
        r"sources\.code_clusters: its table dedup\.code_clusters is also the dedup clusters table of sources\.code"
    )
    with pytest.raises(ConfigError, match=message):
        load_definition(path)
    path = two_sources(tmp_path / "no_clash")
    _add_source(path, "code_clusters", dedup="dedup = false")  # no dedup.code_clusters of its own
    _add_source(path, "web_clusters")  # web is not deduplicated: no dedup.web_clusters beside it
    assert {"code_clusters", "web_clusters"} <= set(load_definition(path).sources)


def test_the_reserved_table_names_are_the_jobs_own_defaults():
    from lakehouse.refs import ingested_files_identifier, quarantine_identifier
    from orchestration.definition_sources import CLUSTERS_SUFFIX, INGESTED_FILES, QUARANTINE, RESERVED
    from pipelines.dedup import DedupOptions
    from rl.build import SNAPSHOTS_TABLE

    assert quarantine_identifier(("filtered", "web"), None) == ("filtered", QUARANTINE)
    assert ingested_files_identifier(("raw", "web"), None) == ("raw", INGESTED_FILES) and INGESTED_FILES in RESERVED
    assert DedupOptions(inputs=["raw.code"], output="dedup.code").clusters_id == ("dedup", f"code{CLUSTERS_SUFFIX}")
    assert SNAPSHOTS_TABLE.split(".") == ["raw", "rl_repositories"] and "rl_repositories" in RESERVED


def test_factory_run_refuses_a_missing_local_input_before_any_step(tmp_path, factory_home):
    path = two_sources(tmp_path)
    (tmp_path / "code" / "a.py").write_text("x = 1\n")  # code's chain could run: it must not start
    (tmp_path / "web" / "a.jsonl").write_text('{"id": "1", "text": "hello"}\n')
    text = path.read_text()
    path.write_text(text.replace('paths = ["web"]', 'paths = ["data/prose-missing", "s3://bucket/not-checked/"]', 1))
    result = run_factory("run", str(path))
    assert result.returncode == 2, result.stderr
    missing = re.escape(f"error: {path}: sources.web.paths: {tmp_path / 'data' / 'prose-missing'} does not exist")
    assert re.search(rf"^{missing}$", result.stderr, re.M), result.stderr
    assert "· factory" not in result.stdout and not (factory_home / "warehouse").exists()
    listed = run_factory("run", str(path), "--list")  # listing needs no input
    assert listed.returncode == 0 and "web/raw" in listed.stdout, listed.stderr
    path.write_text(text.replace('include = ["*.py"]', 'include = ["*.rs"]', 1))
    result = run_factory("run", str(path))
    assert result.returncode == 2, result.stderr
    assert re.search(
        rf"^error: {re.escape(str(path))}: sources\.code\.include: no input files found", result.stderr, re.M
    )
    assert "· factory" not in result.stdout


def test_factory_run_checks_the_inputs_of_the_sources_it_ingests_only(tmp_path):
    import dagster as dg

    from factory_cli.run import _ingested

    definition = load_definition(two_sources(tmp_path))
    assets = list(build_definitions(definition).assets)
    assert _ingested(definition, assets, None) == ["code", "web"]
    selection = dg.AssetSelection.assets(dg.AssetKey(["code", "production"])).upstream()
    assert _ingested(definition, assets, selection) == ["code"]


@pytest.mark.engine  # the first run's ingest runs Spark
def test_factory_run_with_nothing_new_says_so_in_one_line_unless_quiet(factory_home, tmp_path):
    path = two_sources(tmp_path)
    web_records(tmp_path / "web", "part-0.jsonl", 0, 3)
    first = run_factory("run", str(path), "--select", "web/raw")
    assert first.returncode == 0 and "nothing new" not in first.stdout, first.stderr[-3000:]
    again = run_factory("run", str(path), "--select", "web/raw")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == "nothing new: 1 asset(s) checked, all up to date\n"
    quiet = run_factory("run", str(path), "--select", "web/raw", "-q")
    assert quiet.returncode == 0 and quiet.stdout == "", quiet.stderr[-3000:]


def test_factory_run_uses_the_catalog_it_is_given_and_refuses_one_not_configured(
    tmp_path, factory_home, monkeypatch, capsys
):
    """--catalog was accepted and ignored: every step used $FACTORY_CATALOG or the embedded one."""
    from factory_cli.main import main

    monkeypatch.delenv("FACTORY_CATALOG", raising=False)  # restored after the test, whatever run sets
    path = two_sources(tmp_path)
    path.write_text(path.read_text().replace('paths = ["web"]', 'paths = ["missing"]', 1))  # stops before any step
    assert main(["run", str(path), "--catalog", "nosuch"]) == 2
    assert "no catalog named 'nosuch' is configured" in capsys.readouterr().err

    monkeypatch.setenv("PYICEBERG_CATALOG__TEAM__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__TEAM__URI", f"sqlite:///{tmp_path / 'team.db'}")
    monkeypatch.setenv("PYICEBERG_CATALOG__TEAM__WAREHOUSE", (tmp_path / "team-warehouse").as_uri())
    assert main(["run", str(path), "--catalog", "team"]) == 2
    assert re.search(r"sources\.\w+\.(paths|include): ", capsys.readouterr().err)  # the inputs, checked next
    assert os.environ["FACTORY_CATALOG"] == "team"  # what the steps, and the processes they start, read
