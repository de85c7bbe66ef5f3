"""Mixture specs: parsing TOML and YAML, and refusing what cannot be pinned."""

from __future__ import annotations

import pytest

from lakehouse.errors import MixtureSpecError
from mixtures.spec import load_spec, spec_from_dict
from tests.corpora import write_spec

CODE = {"name": "code", "table": "raw.code", "weight": 3}
TEXT = {"name": "text", "table": "raw.text", "weight": 1, "ref": "v1", "filter": "lang = 'en'", "heldout_fraction": 0.1}


@pytest.mark.parametrize("fmt", ["toml", "yaml"])
def test_a_spec_reads_the_same_from_toml_and_yaml(tmp_path, fmt):
    spec = load_spec(write_spec(tmp_path / f"mix.{fmt}", [CODE, TEXT], seed=11, fmt=fmt))
    assert spec.seed == 11
    assert [c.name for c in spec.components] == ["code", "text"]
    assert spec.weights == {"code": 0.75, "text": 0.25}
    text = spec.components[1]
    assert (text.reference, text.filter, text.heldout_fraction) == ("raw.text@v1", "lang = 'en'", 0.1)


def test_weights_may_be_given_together():
    spec = spec_from_dict(
        {"components": [{"name": "a", "table": "raw.a"}, {"name": "b", "table": "raw.b"}], "weights": {"a": 1, "b": 0}}
    )
    assert spec.weights == {"a": 1.0, "b": 0.0}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"components": [{**CODE, "weight": -1}]}, "negative"),
        ({"components": [{**CODE, "weight": 0}, {**TEXT, "weight": 0}]}, "sum to zero"),
        ({"components": [CODE], "weights": {"cod": 1}}, "unknown component(s): cod"),
        ({"components": [CODE], "weights": {"code": 1}}, "weight given twice"),
        ({"components": [{"name": "code", "table": "raw.code"}]}, "no weight"),
        ({"components": [CODE, CODE]}, "repeated: code"),
        ({"components": [{**CODE, "filter": "lang = = 'x'"}]}, "cannot parse filter"),
        ({"components": [{**CODE, "heldout_fraction": 1.5}]}, "heldout_fraction"),
        ({"components": [{**CODE, "table": "raw/../x"}]}, "invalid table identifier"),
        ({"components": [{**CODE, "wieght": 1}]}, "unknown key(s) wieght"),
        ({"components": []}, "at least one component"),
        ({"components": [CODE], "seed": -1}, "seed"),
    ],
)
def test_bad_specs_are_refused_with_the_reason(data, message):
    with pytest.raises(MixtureSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec_from_dict(data)


def test_a_broken_file_names_itself(tmp_path):
    path = tmp_path / "mix.toml"
    path.write_text("seed = [")
    with pytest.raises(MixtureSpecError, match=r"mix\.toml is not valid TOML"):
        load_spec(path)
    with pytest.raises(MixtureSpecError, match="cannot read mixture spec"):
        load_spec(tmp_path / "absent.toml")
