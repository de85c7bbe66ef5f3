"""Filters for documentation: what makes a document boilerplate rather than technical prose."""

from __future__ import annotations

from dataclasses import dataclass

import regex

from quality.base import Doc, FilterResult, QualityFilter, require

# Phrases of licence texts and Debian copyright files: dense in those, rare in a manual.
LICENSE_MARKERS = (
    "copyright",
    "license",
    "licence",
    "warranty",
    "warranties",
    "permission is hereby granted",
    "redistribute",
    "redistribution",
    "merchantability",
    "liable",
    "upstream-name",
    "all rights reserved",
)


class LicenseText(QualityFilter):
    """Drop licence and copyright files: marker phrases per 100 words above a threshold.

    A README with a licence paragraph has well under one marker per 100 words; a copyright
    file, made of licence texts and `Copyright:` lines, has several.
    """

    name = "license_text"

    @dataclass(frozen=True)
    class Config:
        max_markers_per_100_words: float = 1.0  # more than this and the document is licence boilerplate
        markers: tuple[str, ...] = LICENSE_MARKERS  # case-insensitive phrases counted

        def __post_init__(self) -> None:
            require(self.max_markers_per_100_words > 0, "license_text.max_markers_per_100_words must be positive")
            require(
                all(isinstance(m, str) and m for m in self.markers), "license_text.markers must be non-empty strings"
            )
            object.__setattr__(self, "markers", tuple(m.lower() for m in self.markers))

    def __init__(self, config: object | None = None) -> None:
        super().__init__(config)
        self._pattern = regex.compile("|".join(regex.escape(m) for m in self.config.markers), regex.IGNORECASE)

    def filter(self, doc: Doc) -> FilterResult:
        words = len(doc.text.split())
        density = 100 * len(self._pattern.findall(doc.text)) / words if words else 0.0
        if density > self.config.max_markers_per_100_words:
            return FilterResult.dropped("license_text", license_markers_per_100_words=density)
        return FilterResult.kept(license_markers_per_100_words=density)
