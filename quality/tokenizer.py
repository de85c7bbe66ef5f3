"""datatrove's word tokenizer, checked to run offline before any document is filtered.

datatrove picks a tokenizer per language from its ``tokenizer_assignment.csv``. For English
(``eng``/``en``) and most European languages that is a *blank* spaCy pipeline plus the
rule-based sentencizer: no model, no download, the same tokens on every machine for a pinned
spaCy. Other assignments (Stanza, Kiwi, …) fetch models on first use, which a node with no
internet cannot do halfway through a job; they are refused here with a clear error instead.
"""

from __future__ import annotations

import functools

from lakehouse.errors import FilterConfigError

# Tokenizer classes that need nothing beyond installed packages.
_OFFLINE = ("SpaCyTokenizer", "WhitespaceTokenizer")


@functools.cache
def offline_word_tokenizer(language: str):
    """datatrove's word tokenizer for ``language``, loaded now; refuses ones needing downloads."""
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    try:
        tokenizer = load_word_tokenizer(language)
    except ValueError as exc:
        raise FilterConfigError(f"language {language!r}: {exc}") from exc
    except ImportError as exc:  # datatrove checks the tokenizer's package when it is made
        raise FilterConfigError(
            f"language {language!r}: its word tokenizer needs a package that is not installed and, for most, "
            f"a model download ({exc}); the factory runs offline: use a language with a spaCy tokenizer"
        ) from exc
    kind = type(tokenizer).__name__
    if kind not in _OFFLINE:
        raise FilterConfigError(
            f"language {language!r} uses datatrove's {kind}, which needs a model download at first use; "
            f"the factory runs offline: use a language with a spaCy or whitespace tokenizer"
        )
    try:
        tokenizer.word_tokenize("Load the pipeline now.")  # builds the blank spaCy pipeline
    except (ImportError, OSError) as exc:  # e.g. a language whose spaCy tokenizer needs another package
        raise FilterConfigError(f"language {language!r}: its word tokenizer cannot load here: {exc}") from exc
    return tokenizer
