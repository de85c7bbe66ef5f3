"""A manifest is checked for meaning when loaded, not only for its fingerprint.

Anyone can recompute a fingerprint, so each case below edits a real pinned manifest, recomputes
its fingerprint as an editor would, and expects a ManifestError naming what is wrong.
"""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from lakehouse.errors import ManifestError
from mixtures.manifest import Manifest
from mixtures.pin import pin
from mixtures.spec import spec_from_dict
from tests.corpora import make_table


@pytest.fixture
def pinned(catalog) -> dict:
    make_table(catalog, "raw.code", 20, kind="code", files=2)
    make_table(catalog, "raw.text", 20, files=2, row_group_rows=4)
    spec = {
        "seed": 5,
        "components": [
            {"name": "code", "table": "raw.code", "weight": 1},
            {"name": "text", "table": "raw.text", "weight": 1, "heldout_fraction": 0.1},
        ],
    }
    return json.loads(pin(catalog, spec_from_dict(spec)).to_json())


def refingerprint(data: dict) -> dict:
    """What an editor does: the fingerprint recomputed over the edited content."""
    content = {k: v for k, v in data.items() if k not in ("fingerprint", "pinned_at", "code_version")}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {**data, "fingerprint": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()}


def _set(path: str, value):
    """An edit: ``value`` at ``path`` (keys and indices separated by '/'); ``...`` deletes it."""

    def edit(data: dict) -> None:
        *parents, last = path.split("/")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        key = int(last) if isinstance(node, list) else last
        if value is ...:
            del node[key]
        else:
            node[key] = value

    return edit


def _weights(*weights):
    def edit(data: dict) -> None:
        for component, weight in zip(data["components"], weights, strict=True):
            component["weight"] = weight

    return edit


def _record_count(count: int):
    def edit(data: dict) -> None:
        file = data["components"][0]["files"][0]
        file["record_count"], file["row_groups"] = count, [count]

    return edit


EDITS = {
    "negative weight": (_weights(-1.0, 2.0), r"component 'code': weight must be a finite number >= 0, got -1\.0"),
    "weights not summing to one": (_weights(0.5, 0.7), r"weights sum to 1\.2, not 1"),
    "weight not a number": (_weights("0.5", 0.5), r"component 'code': weight must be a finite number"),
    "weight NaN": (_weights(float("nan"), 1.0), r"component 'code': weight must be a finite number"),
    "weight infinite": (_weights(float("inf"), 1.0), r"component 'code': weight must be a finite number"),
    "weight a bool": (_weights(True, 0.0), r"component 'code': weight must be a finite number"),
    "held-out fraction one": (_set("components/1/heldout_fraction", 1.0), r"heldout_fraction must be in \[0, 1\)"),
    "held-out fraction negative": (_set("components/1/heldout_fraction", -0.1), r"heldout_fraction must be in"),
    "negative records": (_record_count(-5), r"record_count must be an integer >= 0, got -5"),
    "records a bool": (_set("components/0/files/0/record_count", True), r"record_count must be an integer"),
    "records a float": (_record_count(2.5), r"record_count must be an integer"),
    "row groups not adding up": (_set("components/0/files/0/row_groups", [1]), r"row groups add up to 1"),
    "row group a string": (_set("components/0/files/0/row_groups", "10"), r"row_groups must be a list"),
    "negative file size": (_set("components/0/files/0/file_size", -1), r"file_size must be an integer >= 0"),
    "path not a string": (_set("components/0/files/0/path", 7), r"path must be a non-empty string"),
    "snapshot id a string": (_set("components/0/snapshot_id", "1"), r"snapshot_id must be an integer"),
    "seed negative": (_set("seed", -1), r"seed must be an integer in \[0, 2\*\*63\)"),
    "seed a bool": (_set("seed", True), r"seed must be an integer"),
    "name not a string": (_set("name", ["x"]), r"name must be a non-empty string"),
    "component name not a string": (_set("components/0/name", 3), r"component name must be a non-empty string"),
    "duplicate component": (_set("components/1/name", "code"), r"component names must be unique: code"),
    "no components": (_set("components", []), r"at least one component"),
    "components not a list": (_set("components", {"a": 1}), r"components must be a list"),
    "catalog not strings": (_set("catalog", {"name": 1}), r"catalog must map names to strings"),
    "filter not a string": (_set("components/0/filter", 1), r"filter must be a string or null"),
    "schema not an object": (_set("components/0/schema", "x"), r"schema must be an object"),
    "files not a list": (_set("components/0/files", "x"), r"files must be a list"),
    "file not an object": (_set("components/0/files/0", "x"), r"component 'code': file 0 must be an object, got str"),
    "missing seed": (_set("seed", ...), r"missing key\(s\) seed"),
    "missing files": (_set("components/0/files", ...), r"component 'code': missing key\(s\) files"),
    "missing file size": (_set("components/0/files/0/file_size", ...), r"missing key\(s\) file_size"),
    "unknown key": (_set("components/0/weights", 1), r"component 'code': unknown key\(s\) weights"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_an_edited_manifest_with_a_recomputed_fingerprint_is_refused(pinned, tmp_path, case):
    edit, message = EDITS[case]
    data = copy.deepcopy(pinned)
    edit(data)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(refingerprint(data)))
    with pytest.raises(ManifestError, match=message):
        Manifest.load(path)


def test_the_pinned_manifest_itself_loads(pinned, tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(refingerprint(pinned)))
    assert Manifest.load(path).fingerprint == pinned["fingerprint"]


@pytest.mark.parametrize(
    "edit", [_set("heldout", ...), _set("components/1/heldout_fraction", ...), _set("provenance", {})]
)
def test_a_key_left_out_or_emptied_with_a_recomputed_fingerprint_is_refused(pinned, tmp_path, edit):
    data = copy.deepcopy(pinned)
    edit(data)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(refingerprint(data)))
    with pytest.raises(ManifestError, match="changed after it was pinned"):
        Manifest.load(path)


def test_a_loaded_manifest_s_fingerprint_is_that_of_its_content(pinned, tmp_path):
    data = refingerprint({**pinned, "provenance": {"sweep": "s1"}})
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(data))
    loaded = Manifest.load(path)
    assert loaded.fingerprint == data["fingerprint"] != pinned["fingerprint"]
    assert Manifest.from_dict(json.loads(loaded.to_json())).fingerprint == loaded.fingerprint
    del loaded.__dict__["fingerprint"]  # computed afresh from the dataclasses
    assert loaded.fingerprint == data["fingerprint"]
