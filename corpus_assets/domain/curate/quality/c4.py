"""``c4``: does the text read like clean web prose, line by line? (C4; datatrove ``C4QualityFilter``)

C4's line rules (a very long word, no terminal punctuation or ending in "...", too few words,
"javascript", policy phrases) mark lines; its document rules (lorem ipsum, a curly bracket)
reject. Here C4 is a *decision*, not a cleaner: nothing is removed, so the text is rejected when
a document rule fires on a kept line, when the kept lines hold too few sentences, or when the
marked lines hold most of the characters (``too_much_removed``, ours: C4 would have kept only a
small remainder, and we keep all or nothing). Sentences are counted with a regex, not NLTK /
spaCy. Details and consequences: docs/curation.md, "Quality".
"""

from __future__ import annotations

import re
from typing import Optional

from pydantic import Field, field_validator

from corpus_assets.domain.curate.quality.base import PROSE, FilterConfig, QualityFilter, Reject, fmt, ratio
from corpus_assets.domain.curate.quality.stats import TextStats

_C4_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_CITATION_RE = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_SENTENCE_END_RE = re.compile(r"[.!?。！？｡．]+[\"'”’)\]]*(?=\s|$)")


class C4Config(FilterConfig):
    remove_citations: bool = True  # strip [1], [edit], [citation needed] before the punctuation test
    filter_no_terminal_punct: bool = True
    min_num_sentences: Optional[int] = Field(5, ge=0)
    min_words_per_line: Optional[int] = Field(3, ge=0)
    max_word_length: Optional[int] = Field(1000, ge=1)
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True
    end_punctuation: tuple[str, ...] = (".", "?", "!", '"', "'", "”", "’", "。", "！", "？", "｡", "．")
    policy_substrings: tuple[str, ...] = _C4_POLICY
    max_removed_char_share: Optional[float] = Field(0.8, ge=0, le=1)  # ours (decision-only C4)

    @field_validator("end_punctuation", "policy_substrings")
    @classmethod
    def _non_empty_items(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or any(not s for s in v):
            raise ValueError("needs at least one entry and no empty strings")
        return v


def check(s: TextStats, c: C4Config, lang: Optional[str]) -> None:
    end_punct = c.end_punctuation
    policy = c.policy_substrings
    total_chars = removed = sentences = 0
    for raw in s.lines:
        line = raw.strip()
        n = len(line)
        total_chars += n
        words = s.line_words(line)
        if c.max_word_length is not None and words and max(map(len, words)) > c.max_word_length:
            removed += n
            continue
        if c.remove_citations and "[" in line:
            line = _CITATION_RE.sub("", line)
        if c.filter_no_terminal_punct and (not line.endswith(end_punct) or line.endswith("...")):
            removed += n
            continue
        if c.min_words_per_line is not None and len(words) < c.min_words_per_line:
            removed += n
            continue
        low = line.lower()
        if c.filter_lorem_ipsum and "lorem ipsum" in low:
            raise Reject("c4.lorem_ipsum", f"kept_line_chars={len(line)}")
        if c.filter_javascript and "javascript" in low:
            removed += n
            continue
        if c.filter_curly_bracket and "{" in line:
            raise Reject("c4.curly_bracket", f"kept_line_chars={len(line)}")
        if c.filter_policy and any(p in low for p in policy):
            removed += n
            continue
        found = len(_SENTENCE_END_RE.findall(line))
        sentences += found if found > 1 else 1
    if c.min_num_sentences is not None and sentences < c.min_num_sentences:
        raise Reject("c4.too_few_sentences", f"sentences={sentences} < {c.min_num_sentences}")
    if c.max_removed_char_share is not None:
        r = ratio(removed, total_chars)
        if r > c.max_removed_char_share:
            raise Reject("c4.too_much_removed", f"removed_share={fmt(r)} > {c.max_removed_char_share}")


FILTER = QualityFilter(
    name="c4",
    config=C4Config,
    reasons=("c4.lorem_ipsum", "c4.curly_bracket", "c4.too_few_sentences", "c4.too_much_removed"),
    check=check,
    default_apply={PROSE: {}},
    default_profiles={
        # code is content in documentation: `{` and "javascript" lines are not web junk there, code
        # lines have no terminal punctuation (not "removed" text), a reference entry has one or two
        # sentences, often ending in a name; pages with next to no prose: the structure filter
        "documentation": {PROSE: {"filter_curly_bracket": False, "filter_javascript": False,
                                  "min_num_sentences": None, "max_removed_char_share": None}},
        "code": {PROSE: {"enabled": False}},
        # turns are short and often end without punctuation
        "conversation": {PROSE: {"filter_no_terminal_punct": False, "min_num_sentences": 2}},
    },
)
