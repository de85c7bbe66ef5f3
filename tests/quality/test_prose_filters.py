"""datatrove's prose filters through our wrappers: pass, fail, metrics, and offline tokenizing."""

from __future__ import annotations

import pytest

from lakehouse.errors import FilterConfigError
from quality.base import Doc
from quality.prose_filters import C4Quality, FineWebQuality, GopherQuality, GopherRepetition
from quality.tokenizer import offline_word_tokenizer
from tests.documents import prose

GOOD = prose(7)


def doc(text: str) -> Doc:
    return Doc("d", text, "text", "en")


@pytest.mark.parametrize("cls", [GopherQuality, GopherRepetition, C4Quality, FineWebQuality])
def test_plain_prose_passes(cls):
    result = cls().filter(doc(GOOD))
    assert result.keep and result.reason is None and not result.metrics


def test_gopher_quality_drops_short_and_stopword_free_text():
    short = GopherQuality().filter(doc("A short note about the garden."))
    assert short.reason == "gopher_short_doc"
    assert short.metrics["words"] == 6 and short.metrics["lines"] == 1  # the profile explains the drop
    no_stop_words = " ".join(f"word{i % 40}x river stone" for i in range(60)) + "."
    assert GopherQuality().filter(doc(no_stop_words)).reason == "gopher_enough_stop_words"


def test_gopher_repetition_drops_repeated_lines():
    repeated = "\n".join(["Buy the best garden tools in the village today."] * 20)
    result = GopherRepetition().filter(doc(repeated))
    assert not result.keep and result.reason.startswith("dup_")
    assert result.metrics["duplicate_line_fraction"] == pytest.approx(19 / 20)


def test_c4_drops_templates_and_lorem_ipsum_but_not_documents_with_a_few_bad_lines():
    template = "\nWrite the {name} of the teacher in the letter.\n"
    assert C4Quality().filter(doc(GOOD + template)).reason == "curly_bracket"
    assert C4Quality().filter(doc("Lorem ipsum dolor sit amet, and so on.\n" + GOOD)).reason == "lorem_ipsum"
    # datatrove cuts such lines from the text; here they only do not count as sentences.
    assert C4Quality().filter(doc(GOOD + "\nclick here\nWe use cookies on this site.\n")).keep


def test_fineweb_drops_list_like_text():
    listing = "\n".join(f"item {i}" for i in range(80))
    result = FineWebQuality().filter(doc(listing))
    assert result.reason in {"line_punct_ratio", "short_line_ratio"}
    assert result.metrics["lines"] == 80


def test_thresholds_reach_datatrove():
    strict = GopherQuality(GopherQuality.Config(min_doc_words=10_000))
    assert strict.filter(doc(GOOD)).reason == "gopher_short_doc"
    lenient = FineWebQuality(FineWebQuality.Config(short_line_thr=1.0, line_punct_thr=0.0, new_line_ratio=10))
    assert lenient.filter(doc("\n".join(f"item number {i}" for i in range(80)))).keep


def test_word_tokenizer_is_offline_and_deterministic():
    tokenizer = offline_word_tokenizer("eng")
    assert type(tokenizer).__name__ == "SpaCyTokenizer"
    assert tokenizer.word_tokenize("Don't stop, it's fine.") == tokenizer.word_tokenize("Don't stop, it's fine.")
    assert tokenizer.word_tokenize("The river's bank.") == ["The", "river", "'s", "bank", "."]


def test_languages_that_need_a_model_download_are_refused():
    with pytest.raises(FilterConfigError, match="model download"):
        offline_word_tokenizer("bel")  # datatrove assigns Stanza, which fetches a model at first use
    with pytest.raises(FilterConfigError, match="tokenizer assigned"):
        GopherQuality(language="not-a-language")
