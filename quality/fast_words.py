"""datatrove's spaCy word and sentence splitting: the same tokens, in a fraction of the time.

datatrove's ``SpaCyTokenizer`` runs each call inside a spaCy memory zone, where spaCy's
tokenizer cache is off (every whitespace-separated chunk goes through the prefix, suffix and
infix regexes again), and it builds a Python ``Token`` object per token to read its text. Here
a private copy of the same blank pipeline (built by datatrove's own class, so the rules are the
same) runs outside memory zones with its cache on, and token strings are sliced from the text by
the offsets spaCy stores. Its cache and vocabulary grow with the distinct chunks it has seen,
so the pipeline is rebuilt after ``REBUILD_CHARS`` characters to keep a worker's memory
bounded. Tokenizers other than a plain spaCy pipeline (Japanese chunking, other libraries) go
through datatrove's own methods. ``tests/quality/test_fast_filters.py`` checks the tokens
against datatrove's on real documents.
"""

from __future__ import annotations

import functools

from quality.tokenizer import offline_word_tokenizer

REBUILD_CHARS = 20_000_000  # characters tokenized between rebuilds (the cache then holds ~100k chunks)


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

    def _pipeline(self, n_chars: int):
        if self._nlp is None or self._chars > REBUILD_CHARS:
            from datatrove.utils.word_tokenizers import SpaCyTokenizer

            self._nlp = SpaCyTokenizer(self.reference.language).tokenizer  # blank pipeline + sentencizer
            self._nlp.max_length = 1 << 62  # datatrove raises its limit to each text's length
            self._chars = 0
        self._chars += n_chars
        return self._nlp

    def _reference_only(self, text: str) -> bool:
        # A text holding spaCy's symbol name IS_ALPHA can break spaCy inside a memory zone, and
        # datatrove then tokenizes it without that name; whether it breaks depends on the zone's
        # state, so such (rare) texts take datatrove's own path.
        return not self.fast or "IS_ALPHA" in text

    def words(self, text: str) -> list[str]:
        if self._reference_only(text):
            return self.reference.word_tokenize(text)
        from datatrove.utils.word_tokenizers import strip_strings
        from spacy.attrs import IDX, LENGTH

        doc = self._pipeline(len(text)).tokenizer(text)  # the sentencizer does not change tokens
        offsets = doc.to_array([IDX, LENGTH])
        starts = offsets[:, 0].tolist()
        ends = (offsets[:, 0] + offsets[:, 1]).tolist()
        return strip_strings(list(map(text.__getitem__, map(slice, starts, ends))))

    def sentence_count(self, text: str) -> int:
        if self._reference_only(text):
            from datatrove.utils.text import split_into_sentences

            return len(split_into_sentences(text, self.language))
        doc = self._pipeline(len(text))(text)
        # datatrove cuts the text at the sentences' ends but the last: one piece even for none.
        return max(1, sum(1 for _ in doc.sents))


@functools.cache
def fast_words(language: str) -> FastWords:
    """One per language and process, like datatrove's ``load_word_tokenizer``."""
    return FastWords(language)
