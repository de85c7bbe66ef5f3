"""What several filters of a chain derive from one document, derived once per document.

The filter job runs a config's filters one after another over each document; computed alone,
each would split the same text into lines or words again (the prose filters' spaCy word
tokenizing is most of their time). The chain hands every filter's ``decide`` one
``SharedText`` per document; a value is computed on first use and the lists are shared, so
filters must not change them.
"""

from __future__ import annotations

from typing import Protocol


class WordSplitter(Protocol):
    def words(self, text: str) -> list[str]: ...


class SharedText:
    """Lazily derived views of one document's text."""

    __slots__ = ("_lines", "_words", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._lines: list[str] | None = None
        self._words: dict[int, list[str]] = {}

    def splitlines(self) -> list[str]:
        """``text.splitlines()``."""
        if self._lines is None:
            self._lines = self.text.splitlines()
        return self._lines

    def words(self, splitter: WordSplitter) -> list[str]:
        """``splitter.words(text)``, once per splitter (a language's word tokenizer)."""
        key = id(splitter)
        if key not in self._words:
            self._words[key] = splitter.words(self.text)
        return self._words[key]
