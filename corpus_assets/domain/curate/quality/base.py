"""What a quality filter is: a name, a strict config model, stable reason codes and a check.

A filter only *decides*, it never modifies text, so one filter can be switched, re-thresholded or
added without touching the others. Its check reads the shared ``TextStats`` of the text (never
the raw text tokenized again: that is what keeps all filters together fast) and raises
``Reject(reason, detail)`` on the first failing rule, rules in a fixed order, so a verdict is
deterministic. A filter may instead (or also) check the record itself (``check_record``: the
preference-pair rules, a conversation without an assistant turn).

Adding a filter: a module next to this one that defines its config (a ``FilterConfig``), its
check and ``FILTER = QualityFilter(...)``, one line in ``registry.FILTERS``, and its test. The
config model becomes a section of ``QualityConfig`` under the filter's name, its reason codes
join ``REASON_CODES``, and ``default_apply`` says where the default policy runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from pydantic import BaseModel, ConfigDict

from corpus_assets.domain.curate.quality.stats import TextStats
from corpus_assets.domain.ingest.sources_config import QUALITY_PROFILES

if TYPE_CHECKING:
    from corpus_assets.domain.canonical.records import Record

__all__ = [
    "QUALITY_CODE_VERSION",
    "FilterConfig",
    "Reject",
    "QualityFilter",
    "TextCheck",
    "RecordCheck",
    "ratio",
    "fmt",
    "PROSE",
    "CODE",
    "ANSWERS",
    "TASK",
    "DEFAULT_KEYS",
    "QUALITY_PROFILES",
    "WEB",
    "check_profile",
]

# Bump when a rule's definition changes (not its thresholds: those are digested from the config).
QUALITY_CODE_VERSION = "1"


class FilterConfig(BaseModel):
    """Base of every filter's thresholds: unknown keys are errors (naming the key), values are
    frozen (they are digested into versions), and every filter can be switched off."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = True


class Reject(Exception):
    """Raised by a check: ``reason`` is one of the filter's reason codes, ``detail`` holds numbers
    and field names only, never the text."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail


# check(stats of the judged text, the filter's effective config, langid label or None)
TextCheck = Callable[[TextStats, Any, Optional[str]], None]
# check_record(record, the filter's effective config, the judged text or None)
RecordCheck = Callable[["Record", Any, Optional[str]], None]

# apply keys ("<schema_type>/<domain>") of the default policy, in the order its map lists them
PROSE = "document/prose"
CODE = "document/code"
ANSWERS = ("messages/*", "instruction/*", "reasoning/*", "preference/*")  # judged text: an answer
TASK = "task/*"
DEFAULT_KEYS = (PROSE, CODE, *ANSWERS, TASK)
WEB = "web"  # the profile of the published thresholds (a source's default)


def check_profile(profile: str) -> str:
    """``profile`` if it is a quality profile, else ``ValueError`` naming them."""
    if profile not in QUALITY_PROFILES:
        raise ValueError(f"unknown quality profile {profile!r}; profiles are {', '.join(QUALITY_PROFILES)}")
    return profile


_NAME_RE = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per filter
class QualityFilter:
    """One filter family.

    ``reasons`` lists every code a check may raise (``"<name>.<rule>"``); ``check`` judges a text
    (a filter with one is a *text filter*, usable with ``judge_text``), ``check_record`` a record
    (run by ``judge_record`` before any text check). ``record_types`` limits the schema types the
    apply map may run it for (empty: all). ``default_apply`` maps the apply keys the default
    policy runs the filter for to the overrides of its thresholds there (``{}``: none);
    ``default_profiles`` maps a quality profile to the apply keys whose thresholds it changes
    and the overrides it puts on top of those (a record of a source with that profile)."""

    name: str
    config: type[FilterConfig]
    reasons: tuple[str, ...]
    check: Optional[TextCheck] = None
    check_record: Optional[RecordCheck] = None
    record_types: tuple[str, ...] = ()
    default_apply: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    default_profiles: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.name):
            raise ValueError(f"filter name {self.name!r} must be lower_snake_case")
        if not (isinstance(self.config, type) and issubclass(self.config, FilterConfig)):
            raise TypeError(f"filter {self.name!r}: config must be a FilterConfig subclass")
        if self.check is None and self.check_record is None:
            raise ValueError(f"filter {self.name!r} has neither check nor check_record")
        foreign = [r for r in self.reasons if not r.startswith(f"{self.name}.") or r == f"{self.name}."]
        if not self.reasons or foreign or len(set(self.reasons)) != len(self.reasons):
            raise ValueError(f"filter {self.name!r}: reasons must be distinct '{self.name}.<rule>' codes")
        for profile, keys in self.default_profiles.items():
            if profile not in QUALITY_PROFILES or profile == WEB:
                raise ValueError(f"filter {self.name!r}: default_profiles names {profile!r}; "
                                 f"profiles are {', '.join(p for p in QUALITY_PROFILES if p != WEB)}")
            unknown = [k for k in keys if k not in self.default_apply]
            if unknown:
                raise ValueError(f"filter {self.name!r}: profile {profile!r} changes {unknown}, where it does not run")

    @property
    def is_text_filter(self) -> bool:
        return self.check is not None


def ratio(a: float, b: float) -> float:
    """``a / b``, 0 when ``b`` is 0."""
    return a / b if b else 0.0


def fmt(x: float) -> str:
    """How a measured share or mean is written in a detail."""
    return f"{x:.4f}"
