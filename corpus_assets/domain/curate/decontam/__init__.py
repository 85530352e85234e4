"""Benchmark decontamination: the frozen evaluation registry, and n-gram containment from the
benchmark side against it.

A benchmark question pasted into a long page shares almost nothing with the page as a whole, yet
all of the question is in it; so the measure is the share of the item's n-grams found in the
record, not a similarity of the two. One path decides for every caller: the curated layer and
the benchmark both call ``Decontaminator.decide``.

- ``config``          the policy (``DecontamConfig``), its version, its reason codes
- ``eval_registry``   the protected items and their digest
- ``normalize``       the tokenizer shared by both sides (with character offsets)
- ``ngrams``          token and n-gram hashes
- ``index``           the n-gram index over the registry, and the matches it finds (containment
                      >= tau, or the long n-gram rule for long items)
- ``masking``         span replacement for the ``mask`` action
- ``decontaminator``  the per-record decision
- ``report``          the contamination report, the per-benchmark coverage (what could not be
                      checked) and the limits text the data card prints

The method, its settings and its limits: docs/curation.md, "Decontamination".
"""

from corpus_assets.domain.curate.decontam.config import (
    DECONTAM_CODE_VERSION,
    REASON_BENCHMARK_MATCH,
    REASON_MASKED,
    RULE_CONTAINMENT,
    RULE_LONG_NGRAM,
    DecontamConfig,
    decontam_policy_version,
)
from corpus_assets.domain.curate.decontam.decontaminator import (
    TEXT_FIELD,
    DecontamDecision,
    Decontaminator,
    FieldMatches,
)
from corpus_assets.domain.curate.decontam.index import (
    UNIT_ALL_SUPPRESSED,
    UNIT_CHECKED,
    UNIT_LONG_RULE,
    UNIT_TOO_SHORT,
    ContaminationIndex,
    Match,
)
from corpus_assets.domain.curate.decontam.masking import DEFAULT_PLACEHOLDER, mask_spans, merge_spans
from corpus_assets.domain.curate.decontam.ngrams import ngram_hashes, token_hashes
from corpus_assets.domain.curate.decontam.normalize import (
    NORMALIZATION_DESCRIPTION,
    TokenizedText,
    compute_extra_word_ranges,
    normalize_tokens,
    tokenize_with_offsets,
)
from corpus_assets.domain.curate.decontam.report import ContaminationReport, coverage_per_benchmark, limits_text

__all__ = [
    "DECONTAM_CODE_VERSION",
    "DEFAULT_PLACEHOLDER",
    "NORMALIZATION_DESCRIPTION",
    "REASON_BENCHMARK_MATCH",
    "REASON_MASKED",
    "RULE_CONTAINMENT",
    "RULE_LONG_NGRAM",
    "TEXT_FIELD",
    "UNIT_ALL_SUPPRESSED",
    "UNIT_CHECKED",
    "UNIT_LONG_RULE",
    "UNIT_TOO_SHORT",
    "ContaminationIndex",
    "ContaminationReport",
    "DecontamConfig",
    "DecontamDecision",
    "Decontaminator",
    "FieldMatches",
    "Match",
    "TokenizedText",
    "compute_extra_word_ranges",
    "coverage_per_benchmark",
    "limits_text",
    "decontam_policy_version",
    "mask_spans",
    "merge_spans",
    "ngram_hashes",
    "normalize_tokens",
    "token_hashes",
    "tokenize_with_offsets",
]
