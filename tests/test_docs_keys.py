"""Every key a user's file may hold has a row in the docs, and the command that reads the file says where.

The keys come from the code that reads each file (the sets it refuses unknown keys against, the
dataclasses' fields), so a key added there without a row in its page's table fails here. A row is
a table line whose first cell names the key in backticks; a key of a nested table is written
dotted (`resources.cpus`, `size.min_bytes`), and a table key (`resources`) counts as documented by
the rows of its keys.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from experiments import ablation, mixture_search, sweep_spec
from mixtures import spec as mixture_spec
from quality import config as filter_config
from rl import train_config as rl_config
from tests.conftest import REPO
from trainer import config as train_config

RESOURCES = {f"resources.{key}" for key in sweep_spec._RESOURCE_KEYS}


def section(page: str, heading: str) -> str:
    """The text under ``heading`` (``## The config``) in ``docs/<page>``, up to the next heading of
    its level or above; headings inside code blocks (TOML comments) are not headings."""
    level = len(heading) - len(heading.lstrip("#"))
    found, lines, code = False, [], False
    for line in (REPO / "docs" / page).read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            code = not code
        marks = re.match(r"(#+) ", line)
        if marks and not code:
            if found and len(marks.group(1)) <= level:
                break
            if line.strip() == heading:
                found = True
                continue
        if found:
            lines.append(line)
    assert found, f"docs/{page} has no heading {heading!r}"
    return "\n".join(lines)


def documented(text: str) -> set[str]:
    """The names in backticks in the first cell of each table row."""
    names = set()
    for line in text.splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            names.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def undocumented(keys: set[str], names: set[str]) -> list[str]:
    return sorted(k for k in keys if k not in names and not any(n.startswith(f"{k}.") for n in names))


def anchors(page: str) -> set[str]:
    """The anchors of ``docs/<page>``'s headings, as GitHub makes them."""
    text = re.sub(r"^```.*?^```", "", (REPO / "docs" / page).read_text(encoding="utf-8"), flags=re.M | re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_sweep_spec_keys_are_documented():
    text = section("experiments.md", "## The sweep spec")
    names = documented(text)
    keys = sweep_spec._SPEC_KEYS | RESOURCES | {f"asha.{key}" for key in sweep_spec._ASHA_KEYS}
    assert not undocumented(keys, names), f"docs/experiments.md#the-sweep-spec lacks {undocumented(keys, names)}"
    missing = undocumented(sweep_spec._DISTRIBUTIONS, names)
    assert not missing, f"docs/experiments.md#the-search-space lacks the distribution(s) {missing}"
    forms = (sweep_spec.MIXTURE_PREFIX, sweep_spec.COMPONENT_PREFIX)
    assert sweep_spec.MIXTURE_KEY in names and all(any(n.startswith(p) for n in names) for p in forms)


def test_ablation_spec_keys_are_documented():
    text = section("experiments.md", "## The ablation spec")
    keys = ablation._SPEC_KEYS | RESOURCES
    assert not undocumented(keys, documented(text)), f"the ablation spec lacks {undocumented(keys, documented(text))}"
    assert sweep_spec.COMPONENT_PREFIX in text and sweep_spec.MIXTURE_PREFIX in text and ablation.SEED_KEY in text


def test_ablation_ladder_keys_are_documented():
    from experiments import ladder_spec

    names = documented(section("experiments.md", "## The ablation ladder"))
    keys = {f"ladder.{key}.<name>" for key in ladder_spec._LADDER_KEYS}
    assert not undocumented(keys, names), f"docs/experiments.md#the-ablation-ladder lacks {undocumented(keys, names)}"


def test_mixture_search_spec_keys_are_documented():
    names = documented(section("experiments.md", "## The mixture-search spec"))
    keys = mixture_search._SPEC_KEYS | RESOURCES
    assert not undocumented(keys, names), f"the mixture-search spec lacks {undocumented(keys, names)}"


def test_mixture_spec_keys_are_documented():
    names = documented(section("loader.md", "### The mixture spec, key by key"))
    keys = mixture_spec._SPEC_KEYS | {f"components.{key}" for key in mixture_spec._COMPONENT_KEYS}
    assert not undocumented(keys, names), f"docs/loader.md's mixture spec lacks {undocumented(keys, names)}"


def test_filter_config_keys_are_documented():
    names = documented(section("jobs.md", "### The filter config, key by key"))
    keys = set(filter_config._TOP_KEYS)
    for name in filter_config.FILTERS:
        fields = {field.name for field in dataclasses.fields(filter_config.filter_class(name).Config)}
        keys |= {f"{name}.{field}" for field in fields}
        invented = {n for n in names if n.startswith(f"{name}.")} - {f"{name}.{field}" for field in fields}
        assert not invented, f"docs/jobs.md documents keys [{name}] does not take: {sorted(invented)}"
    assert not undocumented(keys, names), f"docs/jobs.md's filter config lacks {undocumented(keys, names)}"
    assert any(n.startswith("languages.") and n.endswith(f".{filter_config._SKIP}") for n in names)


@pytest.mark.parametrize(
    "page, section_types",
    [("training.md", train_config._SECTION_TYPES), ("rl-training.md", rl_config.SECTION_TYPES)],
)
def test_training_config_keys_are_documented(page, section_types):
    names = documented(section(page, "## The config"))
    keys = {f"{name}.{field.name}" for name, cls in section_types.items() for field in dataclasses.fields(cls)}
    assert not undocumented(keys, names), f"docs/{page}#the-config lacks {undocumented(keys, names)}"
    invented = {n for n in names if n.split(".")[0] in section_types} - keys
    assert not invented, f"docs/{page} documents keys the config does not take: {sorted(invented)}"


def test_factory_definition_keys_are_documented():
    from experiments import ladder_spec
    from orchestration import definition_load as definition
    from orchestration import definition_sources as sources

    names = documented(section("factory.md", "## The definition, key by key"))
    prefixed = {
        "sources": sources.SOURCE_KEYS,
        "sources.decontaminate": sources.DECONTAMINATE_KEYS,
        "tokenizer": sources.TOKENIZER_KEYS,
        "mixtures": definition.MIXTURE_KEYS,
        "runs": definition.RUN_KEYS,
        "evals": definition.EVAL_KEYS,
        "policies.refinement_gate": definition.GATE_KEYS,
        "policies.mixture_redetermination": definition.SWITCH_KEYS,
        "policies.ablation_adoption": definition.SWITCH_KEYS,
    }
    keys = set(definition.TOP_KEYS) | {f"{p}.{k}" for p, ks in prefixed.items() for k in ks}
    assert not undocumented(keys, names), f"docs/factory.md lacks {undocumented(keys, names)}"
    for kind, spec_keys in (("ablations", definition.ABLATION_KEYS), ("sweeps", definition.SWEEP_KEYS)):
        missing = sorted(k for k in spec_keys if f"experiments.{kind}.{k}" not in names and k not in names)
        assert not missing, f"docs/factory.md's experiments.{kind} lacks {missing}"
    ladder = {f"experiments.ablations.ladder.{key}.<name>" for key in ladder_spec._LADDER_KEYS}
    assert not undocumented(ladder, names), f"docs/factory.md lacks {undocumented(ladder, names)}"
    search = definition.SEARCH_KEYS - {"config"}
    row = next(
        line for line in section("factory.md", "### `[mixtures.NAME]`").splitlines() if "`mixtures.search`" in line
    )
    assert not [k for k in search if f"`{k}`" not in row], "the mixtures.search row must name every search key"


@pytest.mark.parametrize(
    "argv, link",
    [
        (["sweep"], "experiments.md#the-sweep-spec"),
        (["ablate"], "experiments.md#the-ablation-spec"),
        (["ablate"], "experiments.md#the-ablation-ladder"),
        (["mix", "search"], "experiments.md#the-mixture-search-spec"),
        (["mix", "pin"], "loader.md#the-mixture-spec-key-by-key"),
        (["filter"], "jobs.md#the-filter-config-key-by-key"),
        (["train"], "training.md#the-config"),
        (["rl", "train"], "rl-training.md#the-config"),
        (["run"], "factory.md#the-definition-key-by-key"),
        (["rl", "build"], "rl.md#factory-rl-build"),
    ],
)
def test_help_names_where_the_keys_are_documented(argv, link, capsys, monkeypatch):
    from factory_cli.main import main

    monkeypatch.setenv("COLUMNS", "200")  # a narrow terminal must not split the link
    with pytest.raises(SystemExit) as exit_status:
        main([*argv, "--help"])
    assert exit_status.value.code == 0
    assert f"docs/{link}" in capsys.readouterr().out
    page, anchor = link.split("#")
    assert anchor in anchors(page), f"docs/{page} has no heading whose anchor is #{anchor}"
