"""A config's filters run in order over documents; the first that drops one decides.

A filter that raises does not stop the run: the document is dropped with reason
``filter-error:<filter>`` and the error as detail. The job counts the outcomes from the rows it
writes (``dropped.<filter>.<reason>`` in the snapshot summary), so the chain keeps no counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quality.base import Doc, FilterResult, QualityFilter
from quality.config import FilterConfig, filter_class
from quality.shared_text import SharedText

ERROR_PREFIX = "filter-error:"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the chain decided for one document."""

    keep: bool
    filter: str | None = None  # the filter that dropped it
    reason: str | None = None
    detail: str | None = None  # the numbers behind the reason, or the error
    metrics: dict[str, float] = field(default_factory=dict)


KEPT = Outcome(True)


class FilterChain:
    """The filters of one config, built once per process and reused for every document."""

    def __init__(self, config: FilterConfig) -> None:
        self.config = config
        self._by_lang: dict[str | None, tuple[QualityFilter, ...]] = {}
        self._instances: dict[tuple[str, object], QualityFilter] = {}

    def filters_for(self, lang: str | None) -> tuple[QualityFilter, ...]:
        """The filter objects documents in ``lang`` go through (shared where configs are equal)."""
        key = lang if lang in self.config.languages else None
        chain = self._by_lang.get(key)
        if chain is None:
            chain = tuple(self._instance(name, cfg) for name, cfg in self.config.chain_for(key))
            self._by_lang[key] = chain
        return chain

    def _instance(self, name: str, cfg: object) -> QualityFilter:
        if (name, cfg) not in self._instances:
            cls = filter_class(name)
            language = {"language": self.config.language} if cls.uses_language else {}
            self._instances[(name, cfg)] = cls(cfg, **language)
        return self._instances[(name, cfg)]

    def apply(self, doc: Doc) -> Outcome:
        """Run the document through its chain; the first filter that drops it decides."""
        shared = SharedText(doc.text)  # lines and words, split once for all the filters
        for flt in self.filters_for(doc.lang):
            try:
                result: FilterResult = flt.decide(doc, shared)
            except Exception as exc:  # one bad document must not stop the job: quarantine it
                reason = f"{ERROR_PREFIX}{flt.name}"
                return Outcome(False, flt.name, reason, f"{type(exc).__name__}: {exc}"[:1000])
            if not result.keep:
                reason = result.reason or flt.name
                metrics = dict(result.metrics)
                return Outcome(False, flt.name, reason, format_metrics(metrics), metrics)
        return KEPT


def format_metrics(metrics: dict[str, float]) -> str | None:
    """``max_line_length=1204, mean_line_length=87.3``: the metrics as one readable line."""
    if not metrics:
        return None
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
