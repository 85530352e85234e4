"""Rule-based quality filters (curation): sanity, Gopher quality and repetition, C4, FineWeb,
preference pairs — one module per filter family, sharing one set of text statistics.

- ``stats``              the text statistics every filter reads (words, lines, paragraphs, ...),
                         computed lazily, once per text
- ``base``               what a filter is (``QualityFilter``: name, config model, reason codes,
                         check) and the ``Reject`` a check raises
- ``sanity``, ``pair``, ``structure``, ``gopher_quality``, ``gopher_repetition``, ``c4``,
  ``fineweb``            the filter families, each with its config, rules and the thresholds
                         of each quality profile (web, documentation, code, conversation)
- ``registry``           the filters in the order they run: one line per filter
- ``config``             ``QualityConfig`` assembled from the registry; filter and policy versions
- ``judge``              ``judge_text`` / ``judge_record``: verdicts from compiled plans

Import from here, not from the modules. The method, the differences from the published filters
and what runs on which record type: docs/curation.md, "Quality".
"""

from corpus_assets.domain.curate.quality.base import QUALITY_CODE_VERSION, QUALITY_PROFILES, FilterConfig, QualityFilter, Reject
from corpus_assets.domain.curate.quality.c4 import C4Config
from corpus_assets.domain.curate.quality.config import (
    DEFAULT_APPLY,
    DEFAULT_OVERRIDES,
    DEFAULT_PROFILES,
    FILTER_ORDER,
    REASON_CODES,
    TEXT_FILTERS,
    QualityConfig,
    QualityConfigBase,
    filter_version,
    quality_config_model,
    quality_policy_version,
)
from corpus_assets.domain.curate.quality.fineweb import FineWebConfig
from corpus_assets.domain.curate.quality.gopher_quality import GopherQualityConfig
from corpus_assets.domain.curate.quality.gopher_repetition import GopherRepetitionConfig
from corpus_assets.domain.curate.quality.judge import QualityVerdict, judge_record, judge_text, judged_text
from corpus_assets.domain.curate.quality.pair import PairConfig
from corpus_assets.domain.curate.quality.registry import FILTERS
from corpus_assets.domain.curate.quality.sanity import SanityConfig
from corpus_assets.domain.curate.quality.stats import TextStats
from corpus_assets.domain.curate.quality.structure import StructureConfig

__all__ = [
    "QUALITY_CODE_VERSION",
    "FILTERS",
    "FILTER_ORDER",
    "TEXT_FILTERS",
    "REASON_CODES",
    "DEFAULT_APPLY",
    "DEFAULT_OVERRIDES",
    "DEFAULT_PROFILES",
    "QUALITY_PROFILES",
    "FilterConfig",
    "QualityFilter",
    "Reject",
    "TextStats",
    "SanityConfig",
    "StructureConfig",
    "PairConfig",
    "GopherQualityConfig",
    "GopherRepetitionConfig",
    "C4Config",
    "FineWebConfig",
    "QualityConfig",
    "QualityConfigBase",
    "quality_config_model",
    "QualityVerdict",
    "quality_policy_version",
    "filter_version",
    "judge_record",
    "judge_text",
    "judged_text",
]
