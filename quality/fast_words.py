"""datatrove's spaCy word and sentence splitting: the same tokens, in a fraction of the time.

datatrove's ``SpaCyTokenizer`` runs each call inside a spaCy memory zone, where spaCy's
tokenizer cache is off (every whitespace-separated chunk goes through the prefix, suffix and
infix regexes again), and it builds a Python ``Token`` object per token to read its text. Here
a private copy of the same blank pipeline (built by datatrove's own class, so the rules are the
same) runs outside memory zones, and token strings are sliced from the text by the offsets
spaCy stores. Three things make that copy cheaper, none of which changes a token:

- **A cache that works.** spaCy's cache alone catches little: it stops storing once it holds
  ``max_cache_size`` chunks (10,000, reached within a few MB of text), and it stores nothing
  for the rest of a document once one special case (``it's``, ``e.g.``) has been met, because
  that flag is kept per document, not per chunk. So the limit is lifted, and each chunk not
  seen before is first tokenized alone, where the flag concerns that chunk only; the document
  then finds its chunks in the cache. A chunk's tokens depend on the chunk alone (the flag only
  decides whether they are stored).
- **The suffix search reads a chunk's end** (``quality.suffix_search``).
- **One lexical attribute** (see ``_lexical_attributes``).

The cache and vocabulary grow with the distinct chunks seen, so the pipeline is rebuilt after
``REBUILD_CHARS`` characters to keep a worker's memory bounded. Tokenizers other than a plain
spaCy pipeline (Japanese chunking, other libraries) go through datatrove's own methods.
``tests/quality/test_fast_filters.py`` and ``test_fast_tokenizing.py`` check the tokens
against datatrove's on real documents.
"""

from __future__ import annotations

import functools
import re

from quality.suffix_search import tail_suffix_search
from quality.tokenizer import offline_word_tokenizer

REBUILD_CHARS = 20_000_000  # characters tokenized between rebuilds (the cache then holds 100-200k chunks)

_WHITESPACE_RUNS = re.compile(r"\s+")


class FastWords:
    """``words(text)`` equals datatrove's ``split_into_words(text, language)``;
    ``sentence_count(text)`` equals ``len(split_into_sentences(text, language))``."""

    def __init__(self, language: str) -> None:
        self.language = language
        self.reference = offline_word_tokenizer(language)  # checks it runs offline
        kind = type(self.reference).__name__
        # Japanese is cut into byte-bounded chunks and Chinese segmented by jieba: not this path.
        self.fast = kind == "SpaCyTokenizer" and self.reference.config is None
        self._nlp = None
        self._chars = 0
        self._seen: set[str] = set()  # the chunks tokenized alone since the last rebuild

    def _pipeline(self, n_chars: int):
        if self._nlp is None or self._chars > REBUILD_CHARS:
            self._nlp = _private_pipeline(self.reference.language)
            self._chars = 0
            self._seen = set()
        self._chars += n_chars
        return self._nlp

    def _cached(self, text: str):
        """The pipeline, with every chunk of ``text`` in its tokenizer's cache."""
        nlp = self._pipeline(len(text))
        tokenizer = nlp.tokenizer
        # spaCy's chunks: the runs of non-space characters, and the runs of whitespace less a
        # leading space (one space between words is a token's trailing space, not a chunk).
        chunks = set(text.split())
        chunks.update(run[1:] if run[0] == " " else run for run in _WHITESPACE_RUNS.findall(text))
        chunks.discard("")
        new = chunks - self._seen
        for chunk in new:
            tokenizer(chunk)
        self._seen |= new
        return nlp

    def _reference_only(self, text: str) -> bool:
        # A text holding spaCy's symbol name IS_ALPHA can break spaCy inside a memory zone, and
        # datatrove then tokenizes it without that name; whether it breaks depends on the zone's
        # state, so such (rare) texts take datatrove's own path.
        return not self.fast or "IS_ALPHA" in text

    def words(self, text: str) -> list[str]:
        if self._reference_only(text):
            return self.reference.word_tokenize(text)
        from spacy.attrs import IDX, LENGTH

        doc = self._cached(text).tokenizer(text)  # the sentencizer does not change tokens
        offsets = doc.to_array([IDX, LENGTH])
        starts = offsets[:, 0].tolist()
        ends = (offsets[:, 0] + offsets[:, 1]).tolist()
        # datatrove's strip_strings (each token stripped, empty ones dropped) without a Python loop
        return list(filter(None, map(str.strip, map(text.__getitem__, map(slice, starts, ends)))))

    def sentence_count(self, text: str) -> int:
        if self._reference_only(text):
            from datatrove.utils.text import split_into_sentences

            return len(split_into_sentences(text, self.language))
        doc = self._cached(text)(text)
        # datatrove cuts the text at the sentences' ends but the last: one piece even for none.
        return max(1, sum(1 for _ in doc.sents))


def _private_pipeline(language: str):
    """datatrove's blank pipeline (tokenizer + sentencizer) for ``language``, made cheaper."""
    from datatrove.utils.word_tokenizers import SpaCyTokenizer

    nlp = SpaCyTokenizer(language).tokenizer
    nlp.max_length = 1 << 62  # datatrove raises its limit to each text's length
    nlp.tokenizer.max_cache_size = 2**31 - 1  # (a C int) REBUILD_CHARS bounds it instead
    nlp.tokenizer.suffix_search = tail_suffix_search(nlp.Defaults.suffixes, nlp.tokenizer.suffix_search)
    _lexical_attributes(nlp.vocab)
    return nlp


def _lexical_attributes(vocab) -> None:
    """Compute only the lexical attribute the sentencizer reads (``is_punct``).

    spaCy computes some twenty attributes (shape, norm, like_url, …) in Python for each new
    word it meets, which cost as much as the tokenizing itself on text with many distinct
    words. Tokens are cut by the rules and the cache alone, and the sentencizer reads only a
    token's text and ``is_punct``.
    """
    from spacy.attrs import IS_PUNCT

    vocab.lex_attr_getters = {IS_PUNCT: vocab.lex_attr_getters[IS_PUNCT]}


@functools.cache
def fast_words(language: str) -> FastWords:
    """One per language and process, like datatrove's ``load_word_tokenizer``."""
    return FastWords(language)
