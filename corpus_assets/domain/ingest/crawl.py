"""Incremental, polite HTTP crawler for ``http_crawl`` sources (pure logic, no Dagster).

A crawl yields only what changed since the previous state: new and changed pages (captured),
previously captured pages that now answer 404/410 (SOURCE_REMOVED), and refusals/errors so every
attempted URL is accounted for. Unchanged pages (304, or 200 with the same SHA-256) yield nothing
but may refresh their validators in ``state_updates``. The caller persists ``state_updates`` only
after the yielded items are stored, so a failed run never advances the state.

Safety: redirects are followed by hand (at most 5 hops, only to ``allowed_hosts``), robots.txt is
honoured per RFC 9309 (4xx: allow all; 5xx, 429 or unreachable: disallow all), bodies are streamed
and abandoned past ``max_bytes_per_page``, and only http(s) links on allowed hosts are followed.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Optional
from urllib.parse import quote, urljoin, urlsplit, urlunsplit
from urllib.robotparser import RobotFileParser

import httpx
from resiliparse.parse.html import HTMLTree

from corpus_assets.domain.ingest.raw_items import (
    ROBOTS_ALLOWED,
    ROBOTS_DISALLOWED,
    ROBOTS_NOT_APPLICABLE,
    Clock,
    RawItem,
    split_content_type,
    utc_timestamp,
)
from corpus_assets.domain.core.reasons import Reason
from corpus_assets.domain.ingest.sources_config import HttpCrawlSource

Log = Callable[[str], None]

ACTIVE = "active"
REMOVED = "removed"
PENDING = "pending"  # discovered but not fetched yet (the persisted frontier)
REFUSED = "refused"  # a pending page that was visited but not captured (robots, redirect, error)
MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
ROBOTS_MAX_BYTES = 512 * 1024  # RFC 9309 asks parsers to handle at least 500 KiB
BODY_DEADLINE_FACTOR = 5  # a page body must arrive within 5 x timeout_s (slow-drip protection)
LOG_EVERY = 25
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"  # RFC 3986 pchar plus '/' and existing escapes
_QUERY_SAFE = _PATH_SAFE + "?"


@dataclass
class CrawlStateEntry:
    """What the crawler remembers per URI between runs (validators and the last content digest)."""

    uri: str
    etag: Optional[str] = None
    last_modified: Optional[str] = None
    content_sha256: Optional[str] = None
    status: str = ACTIVE  # "active" | "removed" | "pending" | "refused"


@dataclass
class CrawlStats:
    fetched: int = 0  # pages requested (what max_pages bounds); robots.txt and robots refusals not included
    new: int = 0
    changed: int = 0
    unchanged: int = 0  # 200 with the same SHA-256 as before
    not_modified: int = 0  # 304
    removed: int = 0
    refused_robots: int = 0
    refused_redirect: int = 0
    errors: int = 0  # HTTP_ERROR + FETCH_ERROR items
    too_large: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def normalize_url(url: str, base: Optional[str] = None) -> Optional[str]:
    """Absolute http(s) URL without its fragment; scheme and host lowercased, unsafe characters
    percent-encoded (so ``/a b`` and ``/a%20b`` are one page); None for anything else."""
    try:
        parts = urlsplit(urljoin(base, url.strip()) if base else url.strip())
        if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            return None
        path = quote(parts.path or "/", safe=_PATH_SAFE)
        query = quote(parts.query, safe=_QUERY_SAFE)
        return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, query, ""))
    except ValueError:  # e.g. an invalid IPv6 literal or port
        return None


def extract_links(body: bytes, base_url: str, charset: Optional[str] = None) -> list[str]:
    """Normalized http(s) links of an HTML page in document order (duplicates removed)."""
    try:
        tree = HTMLTree.parse_from_bytes(body, charset or "utf-8", "replace")
    except (LookupError, ValueError):
        tree = HTMLTree.parse_from_bytes(body, "utf-8", "replace")
    if tree.document is None:
        return []
    base_el = tree.document.query_selector("base[href]")
    if base_el is not None:
        base_url = normalize_url(base_el.getattr("href") or "", base_url) or base_url
    seen: dict[str, None] = {}
    for el in tree.document.query_selector_all("a[href]"):
        url = normalize_url(el.getattr("href") or "", base_url)
        if url is not None:
            seen.setdefault(url, None)
    return list(seen)


class _Robots:
    """One host's robots decision: a parsed file, or allow-all / disallow-all with the reason."""

    def __init__(self, parser: Optional[RobotFileParser], allow_all: bool, note: str):
        self.parser, self.allow_all, self.note = parser, allow_all, note

    def allows(self, user_agent: str, url: str) -> bool:
        if self.parser is not None:
            return self.parser.can_fetch(user_agent, url)
        return self.allow_all


@dataclass
class _Outcome:
    """Result of visiting one URL: an item to yield (or None) and an HTML body whose links to follow."""

    item: Optional[RawItem] = None
    html: Optional[bytes] = None
    url: str = ""
    charset: Optional[str] = None


class Crawler:
    """Crawl one source incrementally. Iterate ``run()`` once; then read ``state_updates`` and ``stats``.

    ``finished`` is True only when ``run()`` was exhausted (a crawl abandoned midway must not be
    treated as complete). ``state_updates`` can be non-empty without ``has_changes`` (validators
    of unchanged pages were refreshed); persist it either way.
    """

    def __init__(self, source: HttpCrawlSource, previous_state: dict[str, CrawlStateEntry], *,
                 clock: Optional[Clock] = None, log: Optional[Log] = None):
        self.source = source
        self.previous = dict(previous_state)
        self.state_updates: dict[str, CrawlStateEntry] = {}
        self.stats = CrawlStats()
        self._clock = clock
        self._log = log or (lambda _msg: None)
        self._allowed = {h.lower() for h in source.allowed_hosts}
        self._robots: dict[tuple[str, str], _Robots] = {}
        self._last_request: dict[str, float] = {}
        self._client: Optional[httpx.Client] = None
        self._started = False
        self.finished = False

    @property
    def has_changes(self) -> bool:
        return (self.stats.new + self.stats.changed + self.stats.removed) > 0

    # --- driver ------------------------------------------------------------------------------

    def run(self) -> Iterator[RawItem]:
        if self._started:
            raise RuntimeError("a Crawler runs once; create a new one for the next crawl")
        self._started = True
        src = self.source
        frontier: deque[str] = deque()
        queued: set[str] = set()

        def enqueue(url: Optional[str]) -> None:
            if url is not None and url not in queued and urlsplit(url).netloc in self._allowed:
                queued.add(url)
                frontier.append(url)

        for seed in src.seeds:
            url = normalize_url(seed)
            if url is None or urlsplit(url).netloc not in self._allowed:
                self._log(f"{src.id}: seed {seed} is not on an allowed host; skipped")
            enqueue(url)
        # The frontier left by earlier crawls first (so a crawl bounded by max_pages keeps growing
        # across runs), then every known page, so removals and edits are noticed.
        for uri in sorted(u for u, e in self.previous.items() if e.status == PENDING):
            enqueue(uri)
        for uri in sorted(u for u, e in self.previous.items() if e.status == ACTIVE):
            enqueue(uri)
        done: set[str] = set()
        started = time.monotonic()
        next_log = LOG_EVERY
        headers = {"User-Agent": src.user_agent}
        with httpx.Client(headers=headers, timeout=src.timeout_s, follow_redirects=False) as client:
            self._client = client
            while frontier and self.stats.fetched < src.max_pages:
                url = frontier.popleft()
                if url in done:
                    continue
                outcome = self._visit(url, done)
                if outcome.item is not None:
                    yield outcome.item
                if outcome.html is not None:
                    for link in extract_links(outcome.html, outcome.url, outcome.charset):
                        enqueue(link)
                if self.stats.fetched >= next_log:
                    next_log += LOG_EVERY
                    self._log(self._progress(started, len(frontier)))
        self._client = None
        # Persist what was discovered but not reached, so the next crawl starts from it.
        for url in frontier:
            prev = self.previous.get(url)
            if url not in done and url not in self.state_updates and (prev is None or prev.status == REMOVED):
                self.state_updates[url] = CrawlStateEntry(uri=url, status=PENDING)
        # A pending page that was visited and not captured leaves the frontier; links found on
        # fetched pages bring it back if it is still linked.
        for url in sorted(done):
            prev = self.previous.get(url)
            if prev is not None and prev.status == PENDING and url not in self.state_updates:
                self.state_updates[url] = CrawlStateEntry(uri=url, status=REFUSED)
        self.finished = True
        self._log(self._progress(started, len(frontier), final=True))

    def _progress(self, started: float, queued: int, final: bool = False) -> str:
        elapsed = max(time.monotonic() - started, 1e-9)
        s = self.stats
        head = "crawl done" if final else "crawling"
        return (f"{self.source.id}: {head}: {s.fetched} fetched ({s.fetched / elapsed:.1f} pages/s), {queued} queued; "
                f"new={s.new} changed={s.changed} unchanged={s.unchanged} not_modified={s.not_modified} "
                f"removed={s.removed} refused_robots={s.refused_robots} refused_redirect={s.refused_redirect} "
                f"errors={s.errors} too_large={s.too_large}")

    # --- one URL -----------------------------------------------------------------------------

    def _item(self, url: str, status: Reason, detail: str, **kw) -> RawItem:
        kw.setdefault("robots", ROBOTS_ALLOWED if self.source.obey_robots else ROBOTS_NOT_APPLICABLE)
        return RawItem(item_id=url, uri=url, retrieved_at=utc_timestamp(self._clock), content=None,
                       status=status.value, status_detail=detail, **kw)

    def _visit(self, url: str, done: set[str]) -> _Outcome:
        """Fetch ``url``, following allowed redirects; counts stats and records state updates."""
        current = url
        for hop in range(MAX_REDIRECTS + 1):
            done.add(current)
            if self.source.obey_robots:
                robots = self._robots_for(current)
                if not robots.allows(self.source.user_agent, current):
                    self.stats.refused_robots += 1
                    detail = robots.note or "disallowed by robots.txt"
                    return _Outcome(self._item(current, Reason.ROBOTS_DISALLOWED, detail, robots=ROBOTS_DISALLOWED))
            if hop == 0:
                self.stats.fetched += 1
            result = self._fetch(current)
            if not isinstance(result, str):
                if result.item is not None and current != url:
                    result.item.extra["redirected_from"] = url
                return result
            target = result  # a redirect to follow
            if target in done:
                return _Outcome()  # already handled in this run
            current = target
        self.stats.errors += 1
        return _Outcome(self._item(url, Reason.HTTP_ERROR, f"more than {MAX_REDIRECTS} redirects"))

    def _fetch(self, url: str):
        """One GET. Returns an _Outcome, or the next URL (str) when an allowed redirect should be followed."""
        prev = self.previous.get(url)
        known = prev if prev is not None and prev.status == ACTIVE else None
        headers = {}
        if known is not None and known.etag:
            headers["If-None-Match"] = known.etag
        if known is not None and known.last_modified:
            headers["If-Modified-Since"] = known.last_modified
        self._polite_wait(url)
        try:
            with self._client.stream("GET", url, headers=headers) as resp:
                return self._handle(url, resp, known)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            self.stats.errors += 1
            return _Outcome(self._item(url, Reason.FETCH_ERROR, f"{type(exc).__name__}: {exc}"[:300]))

    def _handle(self, url: str, resp: httpx.Response, known: Optional[CrawlStateEntry]):
        status = resp.status_code
        if status in REDIRECT_STATUSES:
            location = resp.headers.get("location")
            if not location:
                self.stats.errors += 1
                detail = f"HTTP {status} without Location"
                return _Outcome(self._item(url, Reason.HTTP_ERROR, detail, http_status=status))
            target = normalize_url(location, url)
            if target is None or urlsplit(target).netloc not in self._allowed:
                self.stats.refused_redirect += 1
                host = urlsplit(target).netloc if target else "a non-http(s) URL"
                detail = f"redirect to {host} refused (not an allowed host)"
                return _Outcome(self._item(url, Reason.REDIRECT_OFF_HOST, detail, http_status=status))
            return target
        if status == 304 and known is not None:
            self.stats.not_modified += 1
            return _Outcome()
        if 200 <= status < 300:
            return self._handle_ok(url, resp, known)
        if status in (404, 410) and known is not None:
            self.stats.removed += 1
            self.state_updates[url] = CrawlStateEntry(uri=url, status=REMOVED)
            return _Outcome(self._item(url, Reason.SOURCE_REMOVED, f"HTTP {status} for a previously captured page",
                                       http_status=status))
        self.stats.errors += 1
        return _Outcome(self._item(url, Reason.HTTP_ERROR, f"HTTP {status}", http_status=status))

    def _handle_ok(self, url: str, resp: httpx.Response, known: Optional[CrawlStateEntry]) -> _Outcome:
        limit = self.source.max_bytes_per_page
        declared = resp.headers.get("content-length", "")
        body = None if declared.isdigit() and int(declared) > limit else _read_limited(resp, limit, self._deadline())
        if body is None:
            self.stats.too_large += 1
            return _Outcome(self._item(url, Reason.TOO_LARGE, f"body exceeds max_bytes_per_page={limit}",
                                       http_status=resp.status_code))
        ctype, charset = split_content_type(resp.headers.get("content-type"))
        etag, last_modified = resp.headers.get("etag"), resp.headers.get("last-modified")
        digest = hashlib.sha256(body).hexdigest()
        html = body if ctype in HTML_TYPES else None
        entry = CrawlStateEntry(uri=url, etag=etag, last_modified=last_modified, content_sha256=digest)
        if known is not None and known.content_sha256 == digest:
            self.stats.unchanged += 1
            if (known.etag, known.last_modified) != (etag, last_modified):
                self.state_updates[url] = entry
            return _Outcome(None, html, url, charset)
        if known is None:
            self.stats.new += 1
        else:
            self.stats.changed += 1
        self.state_updates[url] = entry
        item = RawItem(item_id=url, uri=url, retrieved_at=utc_timestamp(self._clock), content=body,
                       content_type=ctype, http_status=resp.status_code,
                       robots=ROBOTS_ALLOWED if self.source.obey_robots else ROBOTS_NOT_APPLICABLE,
                       etag=etag, last_modified=last_modified, extra={"charset": charset} if charset else {})
        return _Outcome(item, html, url, charset)

    def _deadline(self) -> float:
        return time.monotonic() + BODY_DEADLINE_FACTOR * self.source.timeout_s

    # --- politeness and robots ---------------------------------------------------------------

    def _polite_wait(self, url: str) -> None:
        host = urlsplit(url).netloc
        delay = self.source.politeness_delay_s
        last = self._last_request.get(host)
        if last is not None and delay > 0:
            remaining = last + delay - time.monotonic()
            if remaining > 0:
                time.sleep(remaining)
        self._last_request[host] = time.monotonic()

    def _robots_for(self, url: str) -> _Robots:
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc)
        if key not in self._robots:
            self._robots[key] = self._load_robots(f"{parts.scheme}://{parts.netloc}/robots.txt")
        return self._robots[key]

    def _load_robots(self, robots_url: str) -> _Robots:
        self._polite_wait(robots_url)
        try:
            with self._client.stream("GET", robots_url, follow_redirects=True) as resp:
                status = resp.status_code
                ctype, charset = split_content_type(resp.headers.get("content-type"))
                body = _read_limited(resp, ROBOTS_MAX_BYTES, self._deadline(), truncate=True) if status < 300 else b""
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            self._log(f"{self.source.id}: {robots_url} unreachable ({type(exc).__name__}): host treated as disallowed")
            return _Robots(None, False, f"robots.txt unreachable ({type(exc).__name__}); host treated as disallowed")
        if status == 429 or status >= 500:
            self._log(f"{self.source.id}: {robots_url} answered HTTP {status}: host treated as disallowed")
            return _Robots(None, False, f"robots.txt answered HTTP {status}; host treated as disallowed")
        if status >= 300:  # 4xx, or a redirect chain that did not end in 2xx
            return _Robots(None, True, "")
        if ctype and ctype != "text/plain":
            self._log(f"{self.source.id}: {robots_url} is {ctype}, not text/plain: treated as no rules (allow all)")
            return _Robots(None, True, "")
        parser = RobotFileParser(robots_url)
        try:
            text = body.decode(charset or "utf-8", "replace")
        except LookupError:  # unknown charset name
            text = body.decode("utf-8", "replace")
        parser.parse(text.splitlines())
        return _Robots(parser, True, "disallowed by robots.txt")


def _read_limited(resp: httpx.Response, limit: int, deadline: float, truncate: bool = False) -> Optional[bytes]:
    """The (decoded) body, or None once it exceeds ``limit`` (or the first ``limit`` bytes if ``truncate``).

    Partial bytes are never returned for a refused page. A body still arriving after ``deadline``
    raises ReadTimeout, which the caller reports as FETCH_ERROR.
    """
    buf = bytearray()
    for chunk in resp.iter_bytes():
        buf += chunk
        if len(buf) > limit:
            return bytes(buf[:limit]) if truncate else None
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("body did not arrive within the page deadline")
    return bytes(buf)
