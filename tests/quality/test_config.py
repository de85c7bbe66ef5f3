"""Filter config files: the shipped defaults, validation of bad files, thresholds that change outcomes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lakehouse.errors import FilterConfigError
from quality.base import Doc
from quality.chain import FilterChain
from quality.config import SHIPPED, load_config
from tests.documents import prose, python_source


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "filters.toml"
    path.write_text(text)
    return str(path)


def test_shipped_defaults_load_by_name_and_carry_their_hash():
    code, text = load_config("code"), load_config("text")
    assert code.path == str(SHIPPED / "code.toml") and code.sources == ("code",)
    assert code.sha256 == hashlib.sha256((SHIPPED / "code.toml").read_bytes()).hexdigest()
    assert text.filters == ("size", "gopher_repetition", "gopher_quality", "c4_quality", "fineweb_quality")
    assert text.settings["c4_quality"].filter_no_terminal_punct is False  # the FineWeb recipe
    assert code.n_bytes_bounds() == (10, 1_000_000)


def test_languages_override_and_skip():
    code = load_config("code")
    json_chain = dict(code.chain_for("json"))
    assert "mean_line_length" not in json_chain
    assert (json_chain["size"].min_bytes, json_chain["size"].max_bytes) == (50, 5000)
    assert json_chain["alphabetic_fraction"].min_fraction == 0.5
    assert dict(code.chain_for("python")) == dict(code.chain_for(None)) == dict(code.settings)


def test_thresholds_change_outcomes(tmp_path):
    docs = [Doc(str(i), python_source(i), "code", "python") for i in range(5)]
    base = 'filters = ["size", "mean_line_length"]\n'
    lenient = FilterChain(load_config(write(tmp_path, base)))
    assert all(lenient.apply(d).keep for d in docs)
    strict = FilterChain(load_config(write(tmp_path, base + "[mean_line_length]\nmax_chars = 5\n")))
    outcomes = [strict.apply(d) for d in docs]
    assert {(o.filter, o.reason) for o in outcomes} == {("mean_line_length", "mean_line_too_long")}
    assert not any(o.keep for o in outcomes)

    text = Doc("t", prose(3), "text")
    assert FilterChain(load_config("text")).apply(text).keep
    many_words = write(tmp_path, 'filters = ["gopher_quality"]\n[gopher_quality]\nmin_doc_words = 5000\n')
    assert FilterChain(load_config(many_words)).apply(text).reason == "gopher_short_doc"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('filters = ["size"', "not valid TOML"),
        ("sources = []", "`filters` must be a list"),
        ('filters = ["sizes"]', "unknown filter 'sizes'"),
        ('filters = ["size", "size"]', "lists a filter twice"),
        ('filters = ["size"]\n[size]\nmax_bites = 3', "unknown key(s) max_bites"),
        ('filters = ["size"]\n[size]\nmin_bytes = 9\nmax_bytes = 3', "max_bytes must be at least min_bytes"),
        ('filters = ["size"]\n[size]\nmax_bytes = "big"', "[size].max_bytes must be an integer, got 'big'"),
        (
            'filters = ["size"]\n[languages.json.size]\nmin_bytes = 1.5',
            "[languages.json.size].min_bytes must be an integer",
        ),
        ('filters = ["size"]\n[mean_line_length]\nmax_chars = 3', "`filters` does not list"),
        ('filters = ["size"]\n[languages.json]\nskip = ["mean_line_length"]', "languages.json.skip"),
        ('filters = ["size"]\n[languages.json.size]\nmin_bytes = -4', "min_bytes must be zero or more"),
        ('filters = ["size"]\nsourcez = ["code"]', "unknown key(s) sourcez"),
        ('filters = ["gopher_repetition"]\n[gopher_repetition]\ntop_n_grams = [[0, 0.2]]', "[n, fraction] pairs"),
    ],
)
def test_bad_config_files_are_refused_with_the_file_named(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(FilterConfigError) as caught:
        load_config(path)
    assert message in str(caught.value) and path in str(caught.value)
    assert str(caught.value).count(Path(path).name) == 1  # the file named once, not once by each layer


def test_missing_config_names_the_shipped_ones(tmp_path):
    with pytest.raises(FilterConfigError, match="shipped defaults: code, docs, text"):
        load_config(str(tmp_path / "absent.toml"))
