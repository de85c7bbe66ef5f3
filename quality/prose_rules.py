"""datatrove's Gopher, C4 and FineWeb rules, restated to share one word tokenizing per document.

``quality.prose_filters`` wraps datatrove's filter objects; that stays the reference. Run one
after another, those objects split the same document into words twice or more (datatrove's
small ``lru_cache`` is emptied by C4's per-line sentence splitting before FineWeb asks again),
and C4 sentence-splits every kept line with spaCy although only ``min_num_sentences`` need
counting. These functions follow datatrove 0.10's ``filter`` methods line for line, and return
its drop reason or ``None``, but take their words from ``SharedText`` (``quality.fast_words``),
stop counting C4 sentences once there are enough, and count per distinct word where Gopher
tests every word. ``tests/quality/test_fast_filters.py`` checks every verdict against
datatrove's on real documents.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import accumulate, compress, count
from operator import itemgetter

from datatrove.pipeline.filters.c4_filters import CITATION_REGEX, END_PUNCTUATION, POLICY_SUBSTRINGS
from datatrove.pipeline.filters.gopher_repetition_filter import find_duplicates, find_top_duplicate, get_n_grams
from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION

from quality.fast_words import FastWords
from quality.shared_text import SharedText

_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile("\n+")
_ELLIPSIS = "..."


def gopher_repetition(cfg, shared: SharedText, words: FastWords) -> str | None:
    text = shared.text
    if not text:
        return "empty"
    paragraphs = _PARAGRAPHS.split(text.strip())
    paragraphs_duplicates, char_duplicates = find_duplicates(paragraphs)
    if cfg.dup_para_frac and paragraphs_duplicates / len(paragraphs) > cfg.dup_para_frac:
        return "dup_para_frac"
    if cfg.dup_para_char_frac and char_duplicates / len(text) > cfg.dup_para_char_frac:
        return "dup_para_char_frac"
    lines = _LINES.split(text)
    line_duplicates, char_duplicates = find_duplicates(lines)
    if cfg.dup_line_frac and line_duplicates / len(lines) > cfg.dup_line_frac:
        return "dup_line_frac"
    if cfg.dup_line_char_frac and char_duplicates / len(text) > cfg.dup_line_char_frac:
        return "dup_line_char_frac"
    tokens = shared.words(words)
    concat = "".join(tokens)
    spaced = " " in concat  # a token holding a space: n-grams as tuples would not match datatrove's strings
    for n, n_frac in cfg.top_n_grams:
        top = _top_n_gram_chars(tokens, n) if not spaced else _top_n_gram_chars_joined(tokens, n)
        if top is not None and top / len(text) > n_frac:
            return f"top_{n}_gram"
    offsets = list(accumulate(map(len, tokens), initial=0))
    for n, n_frac in cfg.dup_n_grams:
        if _repeated_n_gram_chars(concat, offsets, n) / len(text) > n_frac:
            return f"duplicated_{n}_n_grams"
    return None


def _top_n_gram_chars(tokens: list[str], n: int) -> int | None:
    """datatrove's ``find_top_duplicate(get_n_grams(tokens, n))`` (None when there is no n-gram),
    counting tuples rather than joined strings: the same n-grams when no token holds a space,
    first seen in the same order, so ``max`` breaks ties as ``most_common(1)`` does."""
    if len(tokens) < n:
        return None
    counts = Counter(zip(*(tokens[i:] for i in range(n)), strict=False))  # the shorter tails end it
    top, count = max(counts.items(), key=itemgetter(1))
    return (sum(map(len, top)) + n - 1) * count


def _top_n_gram_chars_joined(tokens: list[str], n: int) -> int | None:
    n_grams = get_n_grams(tokens, n)
    return find_top_duplicate(n_grams) if n_grams else None


def _repeated_n_gram_chars(concat: str, offsets: list[int], n: int) -> int:
    """datatrove's ``find_all_duplicate(tokens, n)``: its n-gram is ``"".join(tokens[i:i + n])``,
    here a slice of all tokens joined once (``offsets``: where each token starts in ``concat``).

    datatrove walks every position in Python. An n-gram that occurs once in the document can
    never be found again, so stepping over it changes nothing but the position: the walk here
    visits only the positions of n-grams that occur more than once, found by C-level counting.
    """
    n_grams = list(map(concat.__getitem__, map(slice, offsets[:-n], offsets[n:])))
    counts = Counter(n_grams)
    if len(counts) == len(n_grams):
        return 0
    unique: set[str] = set()
    repeated_chars, idx = 0, 0
    for i in compress(count(), map((1).__lt__, map(counts.__getitem__, n_grams))):
        if i < idx:  # inside the n-gram last counted as repeated: datatrove jumped past it
            continue
        n_gram = n_grams[i]
        if n_gram in unique:
            repeated_chars += len(n_gram)
            idx = i + n
        else:
            unique.add(n_gram)
            idx = i + 1
    return repeated_chars


def gopher_quality(cfg, stop_words: frozenset[str], shared: SharedText, words: FastWords) -> str | None:
    text = shared.text
    tokens = shared.words(words)
    n_words = len(tokens)
    # Each distinct word is tested once and weighted by its count (datatrove tests every word).
    counts = Counter(tokens)
    non_symbol = [(w, c) for w, c in counts.items() if any(ch not in PUNCTUATION_SET for ch in w)]
    n_non_symbol = sum(c for _, c in non_symbol)
    if cfg.min_doc_words and n_non_symbol < cfg.min_doc_words:
        return "gopher_short_doc"
    if cfg.max_doc_words and n_non_symbol > cfg.max_doc_words:
        return "gopher_long_doc"
    # numpy's mean of integer lengths: the sum is exact, so this is the same float (nan if none).
    avg = sum(len(w) * c for w, c in non_symbol) / n_non_symbol if n_non_symbol else float("nan")
    if cfg.min_avg_word_length and avg < cfg.min_avg_word_length:
        return "gopher_below_avg_threshold"
    if cfg.max_avg_word_length and avg > cfg.max_avg_word_length:
        return "gopher_above_avg_threshold"
    if cfg.max_symbol_word_ratio and text.count("#") / n_words > cfg.max_symbol_word_ratio:
        return "gopher_too_many_hashes"
    if cfg.max_symbol_word_ratio and (text.count("...") + text.count("…")) / n_words > cfg.max_symbol_word_ratio:
        return "gopher_too_many_ellipsis"
    lines = shared.splitlines()
    if (
        cfg.max_bullet_lines_ratio
        and sum(s.lstrip().startswith("•") or s.lstrip().startswith("-") for s in lines) / len(lines)
        > cfg.max_bullet_lines_ratio
    ):
        return "gopher_too_many_bullets"
    if (
        cfg.max_ellipsis_lines_ratio
        and sum(s.rstrip().endswith("...") or s.rstrip().endswith("…") for s in lines) / len(lines)
        > cfg.max_ellipsis_lines_ratio
    ):
        return "gopher_too_many_end_ellipsis"
    if cfg.max_non_alpha_words_ratio:
        alpha_words = sum(c for w, c in counts.items() if any(ch.isalpha() for ch in w))
        if alpha_words / n_words < cfg.max_non_alpha_words_ratio:
            return "gopher_below_alpha_threshold"
    if cfg.min_stop_words and len(stop_words.intersection(counts)) < cfg.min_stop_words:
        return "gopher_enough_stop_words"
    return None


def c4_quality(cfg, shared: SharedText, words: FastWords) -> str | None:
    """C4 with ``split_paragraph`` (lines are paragraphs); the caller runs datatrove otherwise."""
    num_sentences = 0
    for line in shared.splitlines():
        line = line.strip()
        line_words = line.split()
        if cfg.max_word_length != -1 and any(len(word) > cfg.max_word_length for word in line_words):
            continue
        if cfg.remove_citations:
            line = CITATION_REGEX.sub("", line)
        if cfg.filter_no_terminal_punct and (not line.endswith(END_PUNCTUATION) or line.endswith(_ELLIPSIS)):
            continue
        if len(line_words) < cfg.min_words_per_line:
            continue
        line_l = line.lower()
        if cfg.filter_lorem_ipsum and "lorem ipsum" in line_l:
            return "lorem_ipsum"
        if cfg.filter_javascript and "javascript" in line_l:
            continue
        if cfg.filter_curly_bracket and "{" in line:
            return "curly_bracket"
        if cfg.filter_policy and any(p in line_l for p in POLICY_SUBSTRINGS):
            continue
        # Only whether min_num_sentences is reached matters: later lines are still read for
        # the rules that drop the whole document, but no longer sentence-split.
        if cfg.min_num_sentences != -1 and num_sentences < cfg.min_num_sentences:
            num_sentences += words.sentence_count(line)
    if num_sentences < cfg.min_num_sentences:
        return "too_few_sentences"
    return None


_STOP_CHARS = tuple(TERMINAL_PUNCTUATION)  # datatrove's default stop_chars


def fineweb_quality(cfg, shared: SharedText, words: FastWords) -> str | None:
    text = shared.text
    lines = [line for line in text.split("\n") if line.strip() != ""]
    if len(lines) == 0:
        return "empty"
    ratio = sum(1 for line in lines if line.endswith(_STOP_CHARS)) / len(lines)
    if ratio < cfg.line_punct_thr and not (ratio == 0 and cfg.line_punct_exclude_zero):
        return "line_punct_ratio"
    ratio = sum(1 for line in lines if len(line) <= cfg.short_line_length) / len(lines)
    if ratio > cfg.short_line_thr:
        return "short_line_ratio"
    ratio = find_duplicates(lines)[1] / len(text.replace("\n", ""))
    if ratio > cfg.char_duplicates_ratio:
        return "char_dup_ratio"
    if text.count("\n") / len(shared.words(words)) > cfg.new_line_ratio:
        return "list_ratio"
    return None
