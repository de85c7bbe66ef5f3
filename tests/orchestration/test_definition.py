"""A factory definition is read as strictly as the other configs, and gives Dagster a graph with
each source's own assets: nothing named after the demo."""

from __future__ import annotations

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
