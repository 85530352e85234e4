"""Site templates: lines that recur across many pages of one source are removed before the filters.

A documentation site or a crawl repeats its navigation on every page (breadcrumbs, "Available
Languages: en | fr", "Prev Up … Home Next" bars, a "Product Site / Documentation Site" header).
The HTML extractor keeps some of it, and the quality filters then reject the page for its
repeated lines although the content is fine. As CCNet does (Wenzek et al. 2020, paragraph hashes
counted across a shard), the template is found by counting in how many pages of a source each
normalized line occurs (its *document frequency*: a line repeated inside one page counts once).

Groups: every page counts in its source and in its (source, language) group, so a multilingual
site's per-language template is found too (the Portuguese breadcrumb of ten pages among 800). A
group with fewer than ``min_pages`` pages is not read for templates. A key is *frequent* in a
group of ``n`` pages when it occurs in at least ``max(min_count, ceil(min_share * n))`` of them.

Units: the *key* of a line is a 64-bit hash (xxh3) of it with whitespace collapsed and case
folded. A line also has *cells* when it splits into two or more at tab runs (table cells as the
extractor renders them), at ``|``, ``>``, ``»``, ``·``, ``•`` between spaces (language bars,
breadcrumbs) and after a colon; the cells of a *row* (three cells or more) are keys too. A line
with ``( ) [ ] { } = ;`` looks like code: its own key is never counted (code samples repeat
idioms across pages), its cells are.

Three streaming passes, over the records in any order (counts are independent of it):

1. ``TemplateCounter.add``: document frequency of every key, in numpy arrays of hashes (never the
   lines). Lossy counting (Manku & Motwani 2002) bounds the memory whatever a group's size: up to
   ``1 / count_error`` pages of a group the counts are exact, beyond it a count may be low by
   ``count_error`` x pages (so the result may then depend on the record order).
2. ``TemplateCounter.isolation`` tells navigation from repeated content. ``}``, ``</Location>``
   or ``Status: Extension`` are frequent in a manual but stand among content lines; "top" or a
   breadcrumb stand on their own. For every frequent key it counts the pages where it stands in a
   *template block* (a run of non-blank lines all template lines by the rules of pass 3 applied
   to the frequent keys, one of them with a letter); keys in template blocks on at least
   ``min_isolated_share`` of their pages are the group's *template keys*. It also counts the
   *patterns* of rows (frequent cells kept, each run of other cells masked): a pattern in enough
   pages is a template row pattern (``Prev | Up | * | Home | Next``).
3. ``TemplateIndex.strip`` (in the curation pass, before the quality filters) removes from a
   record, in either of its groups, the *template lines*: a line whose key is a template key; a
   line whose cells are all template keys, or all but one in a row of four cells or more
   (``Available Languages: da | de | … | zh-cn`` with one rare language); a row of a template
   pattern whose kept cells are template keys. In a block holding a template line it also
   removes the row next to a template row of as many cells that has a template cell (the second
   row of a navigation table: ``40.2. … | Home | 40.4. …``) and the line equal to the page's title
   (which navigation headers repeat). Blank lines left around removed lines are collapsed,
   nothing else changes. A page that is template lines only (an included fragment, a navigation
   page) is left as it is: there is no content to free, the quality filters decide.

Pure and deterministic (no Dagster, logging or I/O). Method, defaults and measurements:
docs/curation.md, "Templates"; docs/benchmarks.md, "Template removal".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, Field

from corpus_assets.domain.core.hashing import canonical_digest

__all__ = [
    "TEMPLATES_CODE_VERSION",
    "TemplateConfig",
    "TemplateCounter",
    "TemplateIndex",
    "SourceTemplates",
    "Stripped",
    "templates_policy_version",
    "build_template_index",
]

# Bump when a rule's definition changes (thresholds are digested from the config).
TEMPLATES_CODE_VERSION = "templates-1"

_CELL_SEP_RE = re.compile(r"\t+|\s[|>»·•](?=\s)|:\s")
_CELL_CHAR_RE = re.compile(r"[\t|>»·•:]")  # a line without these has no cells
_CODE_RE = re.compile(r"[()\[\]{}=;]")
_LETTER_RE = re.compile(r"[^\W\d_]")
_ROW_CELLS = 3  # a line of at least this many cells is a row: its cells are counted
_MASK = 0  # a run of other cells in a row pattern


class TemplateConfig(BaseModel):
    """The ``templates:`` section of ``curation.yaml``; every value enters the policy version."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    min_pages: int = Field(10, ge=2)  # a group (source, or source and language) with fewer pages is not read
    min_share: float = Field(0.02, gt=0, le=1)  # frequent: in at least this share of the group's pages...
    min_count: int = Field(5, ge=2)  # ...and in at least this many pages
    min_isolated_share: float = Field(0.5, ge=0, le=1)  # template key: in a template block on this share of its pages
    count_error: float = Field(0.001, gt=0, lt=1)  # lossy counting: a count may be low by this share of pages
    domains: tuple[str, ...] = ("prose",)  # document records of these domains are read and stripped


def templates_policy_version(config: TemplateConfig) -> str:
    return f"{TEMPLATES_CODE_VERSION}+{canonical_digest(config.model_dump(mode='json'))[:16]}"


# --- lines ----------------------------------------------------------------------------------------


def _norm(s: str) -> str:
    return " ".join(s.split()).casefold()


def _hash(s: str) -> int:
    return xxhash.xxh3_64_intdigest(s.encode("utf-8"))


def _cells(folded: str) -> tuple[int, ...]:
    """Cell keys of a case-folded line that splits into two cells or more, else ``()``."""
    if _CELL_CHAR_RE.search(folded) is None:  # (cheaper than the split that finds nothing)
        return ()
    parts = [c for c in (" ".join(p.split()) for p in _CELL_SEP_RE.split(folded)) if c]
    return tuple(map(_hash, parts)) if len(parts) >= 2 else ()


@dataclass(slots=True)
class _Line:
    index: int  # position in text.split("\n")
    key: int  # never a frequent key for a line that looks like code (pass 1 does not count those)
    norm: str
    cells: tuple[int, ...]  # cell keys when the line splits into two cells or more, else empty
    row: bool  # three cells or more


def _blocks(text: str) -> list[list[_Line]]:
    """The text's blocks (runs of non-blank lines) of parsed lines. Casefolding never adds or
    removes a newline, so the folded lines match the raw ones."""
    blocks: list[list[_Line]] = []
    cur: list[_Line] = []
    for i, folded in enumerate(text.casefold().split("\n")):
        n = " ".join(folded.split())
        if not n:
            if cur:
                blocks.append(cur)
                cur = []
            continue
        cells = _cells(folded)
        cur.append(_Line(i, _hash(n), n, cells, len(cells) >= _ROW_CELLS))
    if cur:
        blocks.append(cur)
    return blocks


def _page_keys(text: str) -> np.ndarray:
    """Pass 1's keys of a page: its lines (those that look like code left out) and the cells of
    its rows."""
    keys: set[int] = set()
    code = _CODE_RE.search
    for folded in text.casefold().split("\n"):
        n = " ".join(folded.split())
        if not n:
            continue
        if code(folded) is None:
            keys.add(_hash(n))
        cells = _cells(folded)
        if len(cells) >= _ROW_CELLS:
            keys.update(cells)
    return _array(keys)


def _array(keys: set[int]) -> np.ndarray:
    return np.fromiter(keys, dtype=np.uint64, count=len(keys))


def _pattern(cells: tuple[int, ...], keys: frozenset[int]) -> Optional[int]:
    """A row's pattern: its cells in ``keys``, each run of other cells masked as one; ``None``
    unless the row has both kinds."""
    parts: list[int] = []
    masked = hit = False
    for k in cells:
        if k in keys:
            parts.append(k)
            hit = True
        elif not parts or parts[-1] != _MASK:
            parts.append(_MASK)
            masked = True
    if not (hit and masked):
        return None
    return xxhash.xxh3_64_intdigest(np.asarray(parts, dtype=np.uint64).tobytes())


def _by_key_or_cells(line: _Line, keys: frozenset[int]) -> bool:
    """A template line by its key, or by its cells: all of them in ``keys``, or all but one in a
    row of four cells or more."""
    if line.key in keys:
        return True
    if not line.cells:
        return False
    other = sum(k not in keys for k in line.cells)
    return other == 0 or (other == 1 and len(line.cells) > _ROW_CELLS)


# --- passes 1 and 2: document frequency, isolation ------------------------------------------------


class _LossyCounter:
    """Pages per 64-bit key: lossy counting over buckets of ``width`` pages, in numpy arrays."""

    def __init__(self, count_error: float) -> None:
        self.width = max(1, math.ceil(1 / count_error))
        self.pages = 0
        self.keys = np.empty(0, dtype=np.uint64)  # sorted
        self.counts = np.empty(0, dtype=np.int64)
        self.deltas = np.empty(0, dtype=np.int64)
        self._pending: list[np.ndarray] = []

    def add(self, page_keys: np.ndarray) -> None:
        """Count one page (``page_keys`` distinct)."""
        self._pending.append(page_keys)
        self.pages += 1
        if self.pages % self.width == 0:  # end of a bucket: merge, then forget the rare keys
            self._merge()
            bucket = self.pages // self.width
            keep = self.counts + self.deltas > bucket
            self.keys, self.counts, self.deltas = self.keys[keep], self.counts[keep], self.deltas[keep]

    def _merge(self) -> None:
        if not self._pending:
            return
        keys, counts = np.unique(np.concatenate(self._pending), return_counts=True)
        self._pending.clear()
        bucket = math.ceil(self.pages / self.width)  # the bucket these pages belong to
        pos = np.searchsorted(self.keys, keys)
        found = pos < len(self.keys)
        found[found] = self.keys[pos[found]] == keys[found]
        self.counts[pos[found]] += counts[found]  # distinct keys: no position twice
        new = ~found
        if new.any():
            order = np.argsort(np.concatenate([self.keys, keys[new]]), kind="stable")
            self.keys = np.concatenate([self.keys, keys[new]])[order]
            self.counts = np.concatenate([self.counts, counts[new].astype(np.int64)])[order]
            self.deltas = np.concatenate([self.deltas, np.full(int(new.sum()), bucket - 1, dtype=np.int64)])[order]

    def at_least(self, threshold: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, counts) of the keys counted in at least ``threshold`` pages, sorted by key."""
        self._merge()
        keep = self.counts >= threshold
        return self.keys[keep], self.counts[keep]


@dataclass
class SourceTemplates:
    """What was found and removed for one source (counts only, never the lines)."""

    pages: int = 0  # document pages read
    threshold: int = 0  # pages a key must occur in to be frequent in the source (0: too few pages)
    groups: int = 0  # groups (the source, its languages) with template keys
    frequent: int = 0  # frequent keys over the source's groups
    template_keys: int = 0  # of which template keys
    template_patterns: int = 0  # template row patterns
    # filled by the curation pass (TemplateIndex.strip)
    records: int = 0  # records stripped of at least one line
    all_template: int = 0  # records of template lines only (left as they are)
    lines_removed: int = 0
    chars_in: int = 0  # characters of the source's records seen by strip
    chars_removed: int = 0

    @property
    def removed_share(self) -> float:
        return self.chars_removed / self.chars_in if self.chars_in else 0.0

    def as_dict(self) -> dict:
        return {**self.__dict__, "removed_share": round(self.removed_share, 6)}


@dataclass
class _Found:
    """Pass 2 state of one group."""

    keys: np.ndarray  # the frequent keys, sorted
    counts: np.ndarray  # their pages
    frequent: frozenset[int]
    isolated: np.ndarray  # pages where each frequent key stood in a template block
    patterns: _LossyCounter
    threshold: int


def _groups(source_id: str, lang: Optional[str]) -> tuple[tuple[str, Optional[str]], ...]:
    return ((source_id, None), (source_id, lang)) if lang else ((source_id, None),)


class TemplateCounter:
    """Passes 1 and 2 (module docstring): ``add`` every page, then ``isolation`` every page again,
    then ``index()``."""

    def __init__(self, config: TemplateConfig) -> None:
        self.config = config
        self._counters: dict[tuple[str, Optional[str]], _LossyCounter] = {}
        self._found: Optional[dict[tuple[str, Optional[str]], _Found]] = None

    def add(self, source_id: str, text: str, lang: Optional[str] = None) -> None:
        if self._found is not None:
            raise RuntimeError("TemplateCounter.add after the isolation pass started")
        keys = _page_keys(text)
        for g in _groups(source_id, lang):
            counter = self._counters.get(g)
            if counter is None:
                counter = self._counters[g] = _LossyCounter(self.config.count_error)
            counter.add(keys)

    def threshold(self, pages: int) -> int:
        """Pages a key must occur in to be frequent in a group of ``pages`` pages (0: too few pages)."""
        c = self.config
        if pages < c.min_pages:
            return 0
        return max(c.min_count, math.ceil(c.min_share * pages))

    def _start_isolation(self) -> dict[tuple[str, Optional[str]], _Found]:
        found = {}
        for g, counter in self._counters.items():
            t = self.threshold(counter.pages)
            if t:
                keys, counts = counter.at_least(t)
                if len(keys):
                    found[g] = _Found(keys, counts, frozenset(keys.tolist()), np.zeros(len(keys), dtype=np.int64),
                                      _LossyCounter(self.config.count_error), t)
        self._found = found
        return found

    def isolation(self, source_id: str, text: str, title: Optional[str] = None, lang: Optional[str] = None) -> None:
        found = self._found if self._found is not None else self._start_isolation()
        groups = [found[g] for g in _groups(source_id, lang) if g in found]
        if not groups:
            return
        blocks = _blocks(text)
        title_n = _norm(title) if title else None
        for f in groups:
            freq = f.frequent
            credited: set[int] = set()
            patterns: set[int] = set()
            for block in blocks:
                # pass 3's rules with the frequent keys for the template keys; a row with a frequent
                # cell may be a template by its pattern or its neighbour, which is not known yet: it
                # does not break a template block
                anchored = False
                template_block = True
                for line in block:
                    if line.row:
                        p = _pattern(line.cells, freq)
                        if p is not None:
                            patterns.add(p)
                    if _by_key_or_cells(line, freq):
                        anchored = True
                    elif not (line.row and any(k in freq for k in line.cells)) and line.norm != title_n:
                        template_block = False
                if template_block and anchored and any(_LETTER_RE.search(line.norm) for line in block):
                    for line in block:
                        if line.key in freq:
                            credited.add(line.key)
                        if line.row:
                            credited.update(k for k in line.cells if k in freq)
            if credited:
                f.isolated[np.searchsorted(f.keys, _array(credited))] += 1
            f.patterns.add(_array(patterns))

    def index(self) -> "TemplateIndex":
        found = self._found if self._found is not None else self._start_isolation()
        share = self.config.min_isolated_share
        groups: dict[tuple[str, Optional[str]], _GroupIndex] = {}
        stats: dict[str, SourceTemplates] = {}
        for (sid, lang), counter in sorted(self._counters.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
            st = stats.setdefault(sid, SourceTemplates())
            if lang is None:
                st.pages, st.threshold = counter.pages, self.threshold(counter.pages)
            f = found.get((sid, lang))
            if f is None:
                continue
            templates = frozenset(f.keys[f.isolated >= share * f.counts].tolist())
            if not templates:
                continue
            patterns = frozenset(f.patterns.at_least(f.threshold)[0].tolist())
            groups[(sid, lang)] = _GroupIndex(f.frequent, templates, patterns)
            st.groups += 1
            st.frequent += len(f.keys)
            st.template_keys += len(templates)
            st.template_patterns += len(patterns)
        return TemplateIndex(self.config, groups, stats)


# --- pass 3: removal ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _GroupIndex:
    frequent: frozenset[int]
    templates: frozenset[int]
    patterns: frozenset[int]  # frequent row patterns (over the frequent keys)

    def template_line(self, line: _Line) -> bool:
        """A template line by its key or cells (``_by_key_or_cells``), or a row of a frequent
        pattern whose kept cells are template keys (``Prev | Up | * | Home | Next``)."""
        if _by_key_or_cells(line, self.templates):
            return True
        if not line.row:
            return False
        p = _pattern(line.cells, self.frequent)
        return p is not None and p in self.patterns and all(k in self.templates for k in line.cells if k in self.frequent)

    def template_cell(self, line: _Line) -> bool:
        return any(k in self.templates for k in line.cells)


@dataclass(frozen=True)
class Stripped:
    text: str
    lines_removed: int
    chars_removed: int  # characters of the removed lines and of the blank lines collapsed with them
    chars_in: int
    all_template: bool = False  # every line was a template line: the text is left as it is

    @property
    def removed_share(self) -> float:
        return self.chars_removed / self.chars_in if self.chars_in else 0.0

    def detail(self) -> str:
        """How a decision detail states it (numbers only; empty when nothing was found)."""
        if self.all_template:
            return "templates: every line is a template line, text left as it is"
        if not self.lines_removed:
            return ""
        return f"templates: removed {self.lines_removed} lines, {self.removed_share:.4f} of chars"


@dataclass
class TemplateIndex:
    """The template keys and patterns per group; ``stats`` per source, with what ``strip`` removed."""

    config: TemplateConfig
    groups: Mapping[tuple[str, Optional[str]], _GroupIndex]
    stats: dict[str, SourceTemplates] = field(default_factory=dict)

    def applies(self, schema_type: str, domain: str) -> bool:
        """Whether records of this type and domain are read and stripped."""
        return self.config.enabled and schema_type == "document" and domain in self.config.domains

    def strip(self, source_id: str, text: str, title: Optional[str] = None, lang: Optional[str] = None) -> Stripped:
        """``text`` without the template lines of its groups (the text itself if it has none)."""
        st = self.stats.get(source_id)
        if st is not None:
            st.chars_in += len(text)
        groups = [self.groups[g] for g in _groups(source_id, lang) if g in self.groups]
        if not groups:
            return Stripped(text, 0, 0, len(text))
        blocks = _blocks(text)
        title_n = _norm(title) if title else None
        drop: set[int] = set()
        for block in blocks:
            direct = [any(g.template_line(line) for g in groups) for line in block]
            if not any(direct):
                continue
            for j, line in enumerate(block):
                if direct[j] or line.norm == title_n:
                    drop.add(line.index)
                elif line.row and any(g.template_cell(line) for g in groups) and any(
                    0 <= i < len(block) and direct[i] and len(block[i].cells) == len(line.cells) for i in (j - 1, j + 1)
                ):
                    drop.add(line.index)  # the other row of a navigation table
        if not drop:
            return Stripped(text, 0, 0, len(text))
        if len(drop) == sum(map(len, blocks)):
            if st is not None:
                st.all_template += 1
            return Stripped(text, 0, 0, len(text), all_template=True)
        out: list[str] = []
        gap = False  # a line was removed since the last kept non-blank line
        for i, line in enumerate(text.split("\n")):
            if i in drop:
                gap = True
                continue
            if not line.strip():
                if gap and (not out or not out[-1].strip()):
                    continue  # a second blank line where lines were removed, or one at the start
            else:
                gap = False
            out.append(line)
        while out and not out[-1].strip():
            out.pop()
        new = "\n".join(out)
        removed = len(text) - len(new)
        if st is not None:
            st.records += 1
            st.lines_removed += len(drop)
            st.chars_removed += removed
        return Stripped(new, len(drop), removed, len(text))


def build_template_index(pages: Iterable[tuple], config: Optional[TemplateConfig] = None) -> TemplateIndex:
    """Passes 1 and 2 over pages held in memory: ``(source_id, text, title, lang)`` tuples (title
    and lang may be ``None``)."""
    items = list(pages)
    counter = TemplateCounter(config or TemplateConfig())
    for sid, text, _title, lang in items:
        counter.add(sid, text, lang)
    for sid, text, title, lang in items:
        counter.isolation(sid, text, title, lang)
    return counter.index()
