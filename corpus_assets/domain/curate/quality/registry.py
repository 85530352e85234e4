"""The quality filters, in the order they run: one line per filter.

Order matters: the first failing rule decides a verdict, so filters run in this order whatever
order a config lists them in, cheap and record-level checks first. The tuple is part of the
policy: ``QualityConfig`` is built from it, and every digest (``filter_version``,
``quality_policy_version``) reads it. To add a filter, write its module (see ``base``) and add
its ``FILTER`` here.
"""

from __future__ import annotations

from corpus_assets.domain.curate.quality import c4, fineweb, gopher_quality, gopher_repetition, pair, sanity, structure
from corpus_assets.domain.curate.quality.base import QualityFilter

FILTERS: tuple[QualityFilter, ...] = (
    pair.FILTER,
    sanity.FILTER,
    structure.FILTER,  # off unless a profile (documentation) switches it on
    gopher_quality.FILTER,
    gopher_repetition.FILTER,
    c4.FILTER,
    fineweb.FILTER,
)
