"""The chain: first drop decides, a raising filter quarantines one document."""

from __future__ import annotations

import pytest

from quality.base import Doc
from quality.chain import FilterChain
from quality.config import parse_config
from tests.documents import prose


def chain(doc: dict) -> FilterChain:
    return FilterChain(parse_config(doc, path="test.toml", sha256="0" * 64))


def test_first_dropping_filter_decides():
    filters = chain({"filters": ["size", "gopher_repetition", "gopher_quality"], "size": {"min_bytes": 20}})
    tiny = filters.apply(Doc("a", "hi", "text"))
    assert (tiny.keep, tiny.filter, tiny.reason, tiny.detail) == (False, "size", "too_small", "n_bytes=2")
    repeated = filters.apply(Doc("b", "\n".join(["The same line again and again."] * 30), "text"))
    assert repeated.filter == "gopher_repetition"  # gopher_quality would drop it too, but comes later
    assert filters.apply(Doc("c", prose(1), "text")).keep


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's mean of no words, before the error
def test_a_filter_that_raises_drops_only_that_document():
    # datatrove's Gopher quality filter divides by the word count: with its minimum switched
    # off, a document of blanks raises ZeroDivisionError inside datatrove.
    filters = chain({"filters": ["gopher_quality"], "gopher_quality": {"min_doc_words": 0}})
    broken = filters.apply(Doc("a", " \n \n", "text"))
    assert (broken.keep, broken.filter, broken.reason) == (False, "gopher_quality", "filter-error:gopher_quality")
    assert broken.detail.startswith("ZeroDivisionError")
    assert filters.apply(Doc("b", prose(2), "text")).keep  # the chain goes on


def test_languages_get_their_own_chain_and_share_equal_filters():
    filters = chain(
        {
            "filters": ["size", "max_line_length"],
            "languages": {"json": {"size": {"max_bytes": 10}}, "markdown": {"skip": ["max_line_length"]}},
        }
    )
    python, json_, markdown = (filters.filters_for(lang) for lang in ("python", "json", "markdown"))
    assert [f.name for f in markdown] == ["size"]
    assert python[1] is json_[1]  # same config: one instance
    assert python[0] is not json_[0] and json_[0].config.max_bytes == 10
    long_line = "x" * 2000
    assert not filters.apply(Doc("a", long_line, "code", "python")).keep
    assert filters.apply(Doc("b", long_line, "code", "markdown")).keep
