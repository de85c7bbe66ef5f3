"""The prose filters' word tokenizing shortcuts give datatrove's results exactly.

``quality.fast_words`` keeps spaCy's cache working (chunks tokenized alone first, no size
limit, pipeline rebuilt after ``REBUILD_CHARS``), ``quality.suffix_search`` reads only a chunk's
end, and ``prose_rules._repeated_n_gram_chars`` walks only repeated n-grams. Each is checked
against the thing it replaces.
"""

from __future__ import annotations

import random
from itertools import accumulate
from pathlib import Path

import pytest

from quality import fast_words
from quality.fast_words import FastWords
from quality.prose_rules import _repeated_n_gram_chars
from quality.suffix_search import tail_suffix_search

SPECIAL_FIRST = (
    "It's (don't) e.g. the start, can't and won't... then plain words follow, 12km and 20°C.\n"
    "The words of this line repeat: alpha beta gamma, delta; epsilon! (zeta) [eta] 'theta'.\n" * 4
)


def _doc_texts(n: int = 12) -> list[str]:
    paths = sorted(p for p in Path("/usr/share/doc").rglob("*") if p.is_file() and p.suffix in {"", ".txt", ".md"})
    texts = []
    for path in paths[:: max(1, len(paths) // n)]:
        try:
            texts.append(path.read_text(encoding="utf-8")[:20_000])
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def test_cached_tokens_are_datatrove_tokens_on_every_pass(monkeypatch):
    """First pass fills the cache, second reads it; rebuilds (every ~30 kB here) empty it."""
    from datatrove.utils.text import split_into_sentences, split_into_words

    monkeypatch.setattr(fast_words, "REBUILD_CHARS", 30_000)
    words = FastWords("eng")
    texts = [SPECIAL_FIRST, *_doc_texts(), "", " \n\t \u00a0 ", "a  b\n\n c\t\td"]
    for _ in range(2):
        for text in texts:
            assert words.words(text) == split_into_words(text, "eng")
            for line in text.splitlines()[:10]:
                assert words.sentence_count(line) == len(split_into_sentences(line, "eng"))


def test_a_documents_chunks_come_from_the_cache_the_second_time(monkeypatch):
    """spaCy's own cache stored nothing after a document's first special case (``It's``) and
    nothing past 10,000 chunks; a second pass over the same text then searched every suffix again."""
    calls = []

    def counting(pieces, current):
        search = tail_suffix_search(pieces, current)

        def counted(chunk):
            calls.append(chunk)
            return search(chunk)

        return counted

    monkeypatch.setattr(fast_words, "tail_suffix_search", counting)
    words = FastWords("eng")
    # (a chunk holding a special case inside punctuation, like "(don't)", is never stored: not here)
    special_first = "It's the start, then can't and plain words follow: (alpha) [beta] 'gamma' delta; 12km.\n" * 3
    many = " ".join(f"w{i}x" for i in range(12_000))  # more distinct chunks than spaCy's limit
    for text in (special_first, many):
        first = words.words(text)
        assert calls, "the first pass must tokenize the chunks"
        calls.clear()
        assert words.words(text) == first
        assert calls == []


def _chunks() -> list[str]:
    chunks = {chunk for text in _doc_texts(40) for chunk in text.split()}
    rng = random.Random(7)
    letters = "a.1)'\"°%kmC-\n,!?…$"
    planted = ["..", "a...", "...\n", "12km", "x.\n", "\n", "\n\n", "'s", "x'S", "end.)", "a." * 5, "…", "....)"]
    randoms = ["".join(rng.choice(letters) for _ in range(rng.randint(0, 12))) for _ in range(20_000)]
    return sorted(chunks) + planted + randoms


def test_tail_suffix_search_finds_spacys_suffixes():
    from datatrove.utils.word_tokenizers import SpaCyTokenizer

    nlp = SpaCyTokenizer("en").tokenizer
    spacy_search = nlp.tokenizer.suffix_search
    tail_search = tail_suffix_search(nlp.Defaults.suffixes, spacy_search)
    assert tail_search is not spacy_search
    for chunk in _chunks():
        ours, theirs = tail_search(chunk), spacy_search(chunk)
        assert (ours and ours.span()) == (theirs and theirs.span()), chunk


def test_tail_suffix_search_keeps_a_search_it_was_not_built_from():
    from datatrove.utils.word_tokenizers import SpaCyTokenizer

    nlp = SpaCyTokenizer("en").tokenizer
    current = nlp.tokenizer.suffix_search
    assert tail_suffix_search([*nlp.Defaults.suffixes, "xyz"], current) is current


@pytest.mark.parametrize("seed", range(3))
def test_repeated_n_gram_chars_are_datatroves(seed):
    from datatrove.pipeline.filters.gopher_repetition_filter import find_all_duplicate

    rng = random.Random(seed)
    for _ in range(1000):
        vocab = ["a", "b", "ab", "c", "bc", "the", "x"][: rng.randint(1, 7)]  # "ab"+"c" == "a"+"bc"
        tokens = [rng.choice(vocab) for _ in range(rng.randint(0, 60))]
        concat, offsets = "".join(tokens), list(accumulate(map(len, tokens), initial=0))
        for n in range(1, 11):
            assert _repeated_n_gram_chars(concat, offsets, n) == find_all_duplicate(tokens, n), (tokens, n)


@pytest.mark.parametrize("unbounded", [True, False])
def test_tail_suffix_search_with_and_without_unbounded_pieces(unbounded):
    """A language whose suffixes are all bounded gets a tail search alone."""
    import re

    pieces = ["'s", r"(?<=[0-9])km", r"\.", "…", *([r"\.\.+", "x+"] if unbounded else [])]
    spacy_search = re.compile("|".join(piece + "$" for piece in pieces)).search
    tail_search = tail_suffix_search(pieces, spacy_search)
    assert tail_search is not spacy_search
    for chunk in ["a's", "12km", "xkm", "end.", "end...", "a.x.", "…", "axxx", "xxxx", "x\n", "..\n", "", "s"]:
        ours, theirs = tail_search(chunk), spacy_search(chunk)
        assert (ours and ours.span()) == (theirs and theirs.span()), chunk
