"""What every filter shares: the document it sees, the result it gives, the interface it has.

A filter is a plain object with ``filter(doc) -> FilterResult``: it knows nothing of Spark,
so the Spark job, the benchmark and unit tests call the very same code (datatrove's habit).
The chain calls ``decide(doc, shared)``, which gives the same result as ``filter(doc)`` and
may reuse what earlier filters derived from the document (``quality.shared_text``); a filter
overrides it only where that is faster, and ``filter`` stays the reference it is tested against.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

from lakehouse.errors import FilterConfigError
from quality.shared_text import SharedText

_NO_METRICS: Mapping[str, float] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Doc:
    """One document as a filter sees it (the columns of a document table it needs)."""

    doc_id: str
    text: str
    source: str = ""
    lang: str | None = None  # programming or natural language, when known
    path: str | None = None
    n_bytes: int | None = None  # size of text in UTF-8 bytes; computed when not given

    @property
    def size(self) -> int:
        return self.n_bytes if self.n_bytes is not None else len(self.text.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class FilterResult:
    """Keep, or drop with a short machine-readable reason; plus the metrics the filter computed."""

    keep: bool
    reason: str | None = None
    metrics: Mapping[str, float] = field(default_factory=lambda: _NO_METRICS)

    @classmethod
    def kept(cls, **metrics: float) -> FilterResult:
        return cls(True, None, metrics or _NO_METRICS)

    @classmethod
    def dropped(cls, reason: str, **metrics: float) -> FilterResult:
        return cls(False, reason, metrics or _NO_METRICS)


class QualityFilter(ABC):
    """One quality rule. Subclasses set ``name`` and ``Config`` and implement ``filter``."""

    name: ClassVar[str]
    Config: ClassVar[type]  # a frozen dataclass of the filter's thresholds, validated on creation
    uses_language: ClassVar[bool] = False  # takes the config's natural language (word tokenizer)

    def __init__(self, config: object | None = None) -> None:
        self.config = config if config is not None else self.Config()

    @abstractmethod
    def filter(self, doc: Doc) -> FilterResult:
        """Decide on one document. May raise: the chain turns that into a quarantine reason."""

    def decide(self, doc: Doc, shared: SharedText) -> FilterResult:
        """``filter(doc)``, faster where a filter can reuse ``shared`` (the same ``doc.text``)."""
        return self.filter(doc)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config})"


def require(condition: bool, message: str) -> None:
    """Reject a bad config value (used by the config dataclasses' ``__post_init__``)."""
    if not condition:
        raise FilterConfigError(message)


def fraction(name: str, value: float) -> None:
    require(0.0 <= value <= 1.0, f"{name} must be between 0 and 1, got {value}")
