"""The filter job's fast path (``decide``) against the reference (``filter``) on real documents.

Every filter's ``decide(doc, shared)`` must give exactly what its ``filter(doc)`` gives: the
same keep, reason and metrics, so the job's outputs are bit-identical to what the reference
would write. Real corpora: a spread of this machine's Python standard library and
``/usr/share/doc`` (the quality benchmark's corpora), the encoded-data evaluation's labelled
files, and planted edge cases.
"""

from __future__ import annotations

import re
import sysconfig
from pathlib import Path

import pytest

from benchmarks.quality.encoded import planted, real_cases
from quality.base import Doc
from quality.chain import ERROR_PREFIX, FilterChain, Outcome, format_metrics
from quality.code_filters import ENCODED_KINDS, encoded_runs
from quality.config import load_config
from quality.fast_words import FastWords
from quality.prose_filters import text_profile
from quality.shared_text import SharedText


def _spread(paths: list[Path], n: int, max_bytes: int) -> list[str]:
    """About ``n`` readable texts spread evenly over ``paths`` (sorted), each under ``max_bytes``."""
    texts = []
    for path in paths[:: max(1, len(paths) // n)]:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text.encode()) <= max_bytes:
            texts.append(text)
    return texts


def _code_texts() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    return _spread(paths, 60, 100_000)


def _doc_texts() -> list[str]:
    paths = sorted(p for p in Path("/usr/share/doc").rglob("*") if p.is_file() and p.suffix in {"", ".txt", ".md"})
    return _spread(paths, 40, 30_000)


EDGE_CASES = [
    "",
    "\n\n\n",
    "word",
    "IS_ALPHA appears here. " * 30,  # datatrove retries spaCy without this symbol name
    "Lorem ipsum dolor sit amet, the text of a template.\n" * 3,
    "A {template} line with the braces.\n" + "A plain sentence of prose, with the words.\n" * 8,
    "- item\n- item two\n• item three\n" * 10,
    "Wait... and then...\nMore of it…\n" * 10,
    "# Heading\n\n## Heading two\n\nThe text of the section is here, and the rest.\n" * 6,
    "tabs\tand\u00a0no-break\u2003spaces, and 0x3f,\u00a00x1a, 0x2b, 0x4c, 0xde, 0xad, 0xbe, 0xef, 0x01\n",
    "data = [" + ", ".join(f"0x{i:02x}" for i in range(64)) + "]\n",
    'blob = "' + "QUJD" * 40 + '"\n',
    "x = '\\x89\\x50\\x4e\\x47\\x0d\\x0a\\x1a\\x0a\\x00\\x00\\x00\\x0d\\x49\\x48\\x44\\x52'\n",
    "g12 34 56 78 9a bc de f0 12 34 56 78\n",  # a word character just before a hex run
    "caf\u00e9 d\u00e9j\u00e0 vu, the words and the text of it, with the accents.\n" * 12,
]


def _reference(chain: FilterChain, doc: Doc) -> Outcome:
    """``FilterChain.apply`` as it was: each filter's ``filter(doc)``."""
    for flt in chain.filters_for(doc.lang):
        try:
            result = flt.filter(doc)
        except Exception as exc:
            return Outcome(False, flt.name, f"{ERROR_PREFIX}{flt.name}", f"{type(exc).__name__}: {exc}"[:1000])
        if not result.keep:
            metrics = dict(result.metrics)
            return Outcome(False, flt.name, result.reason or flt.name, format_metrics(metrics), metrics)
    return Outcome(True)


def _every_filter(chain: FilterChain, doc: Doc) -> None:
    """Each filter of the chain alone, ``decide`` (sharing one SharedText, as the chain does) == ``filter``."""
    shared = SharedText(doc.text)
    for flt in chain.filters_for(doc.lang):
        try:
            expected = flt.filter(doc)
        except Exception as exc:  # the fast path must fail the same way
            with pytest.raises(type(exc)):
                flt.decide(doc, shared)
            continue
        assert flt.decide(doc, shared) == expected, (flt.name, doc.doc_id)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["text", "docs"])
def test_prose_decisions_match_datatrove(config):
    chain = FilterChain(load_config(config))
    texts = _doc_texts() + EDGE_CASES
    assert len(texts) > 40
    for i, text in enumerate(texts):
        doc = Doc(f"d{i}", text, "text", "en")
        assert chain.apply(doc) == _reference(chain, doc), doc.doc_id
        _every_filter(chain, doc)


@pytest.mark.slow
def test_code_decisions_match_the_reference():
    chain = FilterChain(load_config("code"))
    texts = _code_texts() + [text for _, _, _, text in planted()] + EDGE_CASES
    assert len(texts) > 100
    for i, text in enumerate(texts):
        for lang in ("python", "json"):  # json: other thresholds, a filter skipped
            doc = Doc(f"c{i}", text, "code", lang)
            assert chain.apply(doc) == _reference(chain, doc), doc.doc_id
        _every_filter(chain, Doc(f"c{i}", text, "code", "python"))


def test_encoded_runs_are_the_patterns_matches():
    """base64, hex and hex_array found without scanning every position: the very same runs."""
    texts = [text for _, _, _, text in real_cases()[0]] + [text for _, _, _, text in planted()] + EDGE_CASES
    for text in texts:
        for kind in ENCODED_KINDS:
            assert list(encoded_runs(text, (kind,), fast=True)) == list(encoded_runs(text, (kind,))), kind


def test_fast_words_are_datatrove_words():
    from datatrove.utils.text import split_into_sentences, split_into_words

    words = FastWords("eng")
    for text in _doc_texts()[:20] + EDGE_CASES + ["", "   ", "One. Two! Three? Four"]:
        ours, theirs = words.words(text), split_into_words(text, "eng")
        if "IS_ALPHA" in text:
            # Whether spaCy breaks on its own symbol name, and datatrove then drops the name, depends
            # on the state of the tokenizer instance's memory zones (and so on what ran before): the
            # other tokens must agree.
            ours, theirs = ([w for w in ws if w != "IS_ALPHA"] for ws in (ours, theirs))
        assert ours == theirs
        for line in [*text.splitlines()[:20], text[:500]]:
            assert words.sentence_count(line) == len(split_into_sentences(line, "eng"))


def test_alpha_word_fraction_is_the_former_regex():
    """text_profile counts words with a letter one by one; it was one findall of this regex."""
    former = re.compile(r"\S*[^\W\d_]\S*")
    for text in _doc_texts()[:40] + EDGE_CASES + ["---- ==== 1234 " * 50]:
        words = text.split()
        if words:
            assert text_profile(text)["alpha_word_fraction"] == len(former.findall(text)) / len(words)
