"""Pinning a spec against a real (SQLite) Iceberg catalog."""

from __future__ import annotations

import json

import pytest

from lakehouse.errors import InputError, ManifestError, MixtureSpecError, RefNotFoundError
from mixtures.manifest import Manifest
from mixtures.pin import pin
from mixtures.spec import spec_from_dict
from tests.conftest import run_factory
from tests.corpora import make_table, write_spec


def two_components(**text_options) -> dict:
    return {
        "seed": 5,
        "components": [
            {"name": "code", "table": "raw.code", "weight": 2},
            {"name": "text", "table": "raw.text", "weight": 1, **text_options},
        ],
    }


def test_pin_resolves_refs_to_snapshot_ids_and_lists_the_files(catalog, tmp_path):
    code = make_table(catalog, "raw.code", 50, kind="code", files=2)
    text = make_table(catalog, "raw.text", 40, files=2, row_group_rows=7)
    first_text = text.current_snapshot().snapshot_id
    text.manage_snapshots().create_tag(first_text, "v1").commit()
    make_table(catalog, "raw.text", 10, files=1, seed=9)  # main moves on; the tag stays

    manifest = pin(catalog, spec_from_dict(two_components(ref="v1", heldout_fraction=0.2)))

    by_name = {c.name: c for c in manifest.components}
    assert by_name["code"].snapshot_id == code.current_snapshot().snapshot_id
    assert by_name["text"].snapshot_id == first_text and by_name["text"].ref == "v1"
    assert by_name["text"].record_count == 40 and len(by_name["text"].files) == 2
    assert all(sum(f.row_groups) == f.record_count and max(f.row_groups) <= 7 for f in by_name["text"].files)
    assert all(f.text_bytes > 0 for f in by_name["code"].files)
    assert (by_name["code"].weight, by_name["text"].weight) == pytest.approx((2 / 3, 1 / 3))
    assert by_name["text"].heldout_fraction == 0.2 and manifest.heldout["method"] == "blake2b-64"
    assert manifest.catalog["name"] == catalog.name and manifest.seed == 5

    path = tmp_path / "manifest.json"
    manifest.save(path)
    again = Manifest.load(path)
    assert again == manifest and again.fingerprint == manifest.fingerprint
    # The same snapshots pinned again have the same fingerprint; another weight another one.
    assert (
        pin(catalog, spec_from_dict(two_components(ref="v1", heldout_fraction=0.2))).fingerprint == manifest.fingerprint
    )
    assert pin(catalog, spec_from_dict(two_components(ref="v1"))).fingerprint != manifest.fingerprint


def test_a_row_filter_is_checked_against_the_table_and_prunes_files(catalog):
    make_table(catalog, "raw.code", 30, kind="code", files=1)
    make_table(catalog, "raw.text", 30, files=3)
    with pytest.raises(MixtureSpecError, match=r"does not fit the table.*columns: doc_id"):
        pin(catalog, spec_from_dict(two_components(filter="language = 'en'")))
    pinned = pin(catalog, spec_from_dict(two_components(filter="n_bytes < 0", weight=0)))
    assert pinned.component("text").files == ()  # the files' statistics rule them all out
    # With a weight, the loader would have to draw from it: refused at pin, not in the ranks.
    with pytest.raises(InputError, match=r"component 'text' \(raw.text@\d+\) has no records"):
        pin(catalog, spec_from_dict(two_components(filter="n_bytes < 0")))


def test_unknown_refs_and_tampered_manifests_are_refused(catalog, tmp_path):
    make_table(catalog, "raw.code", 10, kind="code", files=1)
    make_table(catalog, "raw.text", 10, files=1)
    with pytest.raises(RefNotFoundError, match="no tag or branch named 'v9'"):
        pin(catalog, spec_from_dict(two_components(ref="v9")))
    path = tmp_path / "manifest.json"
    pin(catalog, spec_from_dict(two_components())).save(path)
    data = json.loads(path.read_text())
    data["components"][0]["weight"] = 0.9
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="changed after it was pinned"):
        Manifest.load(path)
    path.write_text("{}")
    with pytest.raises(ManifestError, match="not a pinned mixture manifest"):
        Manifest.load(path)


@pytest.mark.slow
def test_mix_pin_and_tokenizer_train_on_the_command_line(catalog, factory_home, tmp_path):
    make_table(catalog, "raw.code", 40, kind="code", files=1)
    text = make_table(catalog, "raw.text", 40, files=1)
    spec = write_spec(tmp_path / "mix.toml", two_components()["components"])
    done = run_factory("mix", "pin", str(spec), "--output", str(tmp_path / "m.json"))
    assert done.returncode == 0, done.stderr
    assert "code" in done.stdout and "sha256:" in done.stdout
    assert Manifest.load(tmp_path / "m.json").component("text").snapshot_id == text.current_snapshot().snapshot_id

    bad = write_spec(tmp_path / "bad.toml", [{"name": "code", "table": "raw.code", "weight": -2}])
    refused = run_factory("mix", "pin", str(bad), "--output", str(tmp_path / "bad.json"))
    assert refused.returncode == 2 and "negative" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "bad.json").exists()

    out = tmp_path / "tokenizer.json"
    trained = run_factory(
        "tokenizer", "train", "--input", "raw.code", "raw.text", "--vocab-size", "300", "--output", str(out)
    )
    assert trained.returncode == 0, trained.stderr
    record = json.loads(out.read_text())["model"]["factory"]
    assert [i["table"] for i in record["inputs"]] == ["raw.code", "raw.text"]
    assert record["inputs"][1]["snapshot_id"] == text.current_snapshot().snapshot_id
    assert record["eod_token"] == "<|endoftext|>" and record["documents"] == 80


def test_a_manifest_pinned_through_a_deleted_tag_keeps_its_snapshot(catalog, tmp_path):
    """Deleting a tag changes no manifest: it holds the snapshot id. Pinning the spec again needs the tag."""
    from lakehouse.publish import delete_tag

    make_table(catalog, "raw.code", 10, kind="code", files=1)
    text = make_table(catalog, "raw.text", 10, files=1)
    tagged = text.current_snapshot().snapshot_id
    text.manage_snapshots().create_tag(tagged, "v1").commit()
    path = tmp_path / "manifest.json"
    pin(catalog, spec_from_dict(two_components(ref="v1"))).save(path)

    assert delete_tag(catalog, ("raw", "text"), "v1") == tagged
    component = Manifest.load(path).component("text")
    assert component.snapshot_id == tagged and component.ref == "v1"
    assert catalog.load_table(("raw", "text")).snapshot_by_id(tagged) is not None
    with pytest.raises(RefNotFoundError, match="no tag or branch named 'v1'"):
        pin(catalog, spec_from_dict(two_components(ref="v1")))
