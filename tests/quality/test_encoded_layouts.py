"""The layouts of encoded data real code uses (issue 19): each is caught, ordinary code is kept."""

from __future__ import annotations

import pytest

from benchmarks.quality.encoded import planted
from quality.base import Doc
from quality.code_filters import STARCODER2_KINDS, EncodedData, encoded_runs
from quality.config import load_config

CASES = planted()


@pytest.mark.parametrize(("name", "layout", "text"), [(n, k, t) for n, label, k, t in CASES if label == 1])
def test_each_layout_is_caught(name, layout, text):
    assert not EncodedData().filter(Doc(name, text)).keep
    assert layout in {kind for kind, _, _ in encoded_runs(text)}


@pytest.mark.parametrize(("name", "text"), [(n, t) for n, label, _, t in CASES if label == 0])
def test_ordinary_code_is_kept(name, text):
    """Short hex constants, small lookup tables, a tiny data: URI, long prose strings stay."""
    assert EncodedData().filter(Doc(name, text)).keep


def test_starcoder2_kinds_alone_miss_the_new_layouts():
    """The benchmark's "before": StarCoder2's patterns keep what the new kinds drop."""
    starcoder2 = EncodedData(EncodedData.Config(kinds=STARCODER2_KINDS))
    missed = [name for name, label, _, text in CASES if label == 1 and starcoder2.filter(Doc(name, text)).keep]
    assert len(missed) >= 30


def test_overlapping_runs_are_counted_once():
    """`0x3f,0x1a` matches StarCoder2's hex and hex_array: the fraction must not double it."""
    body = ",".join(f"0x{i % 256:02x}" for i in range(40))
    text = "x = 1\n" * 40 + f"T = [{body}]\n"
    full = EncodedData().filter(Doc("t", text)).metrics["encoded_fraction"]
    starcoder2 = EncodedData(EncodedData.Config(kinds=STARCODER2_KINDS)).filter(Doc("t", text))
    assert full == pytest.approx(starcoder2.metrics["encoded_fraction"], abs=0.02)


def test_shipped_code_config_runs_every_kind():
    settings = load_config("code").settings["encoded_data"]
    assert settings.kinds == EncodedData.Config().kinds and settings.max_table_run_chars == 4096
