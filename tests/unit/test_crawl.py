"""The incremental crawler against real local HTTP servers (an in-memory site and Python's pydoc server)."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone

import httpx
import pytest

from corpus_assets.domain.ingest.crawl import CrawlStateEntry, Crawler, extract_links, normalize_url
from corpus_assets.domain.ingest.raw_items import CAPTURED
from corpus_assets.domain.core.reasons import Reason
from corpus_assets.domain.ingest.sources_config import HttpCrawlSource

try:  # tests/ is not a package today; keep working if it becomes one
    from http_fixture import serve_site
except ImportError:  # pragma: no cover
    from tests.http_fixture import serve_site

GOV = {"license": "CC-BY-4.0", "rights_evidence": "test fixture"}
FIXED = datetime(2026, 11, 29, 14, 0, tzinfo=timezone.utc)
HTML = {"Content-Type": "text/html; charset=utf-8"}


def page(*links: str, text: str = "") -> bytes:
    anchors = "".join(f'<a href="{href}">{href}</a>\n' for href in links)
    return f"<html><body><p>{text}</p>\n{anchors}</body></html>".encode()


def make_site() -> dict:
    return {
        "/robots.txt": (200, {"Content-Type": "text/plain"}, b"User-agent: *\nDisallow: /private/\n"),
        "/": (200, HTML, page("/a.html", "b.html", "/a.html#section", "/private/secret.html", "/search?q=1",
                              "mailto:someone@example.org", "file:///etc/passwd", "javascript:void(0)",
                              "https://example.com/external.html", text="home")),
        "/a.html": (200, HTML, page("/", text="page a")),
        "/b.html": (200, HTML, page("/a.html", text="page b")),
        "/search?q=1": (200, {"Content-Type": "text/plain"}, b"search result"),
        "/private/secret.html": (200, HTML, page(text="secret")),
    }


def make_source(base: str, **kw) -> HttpCrawlSource:
    kw.setdefault("politeness_delay_s", 0)
    kw.setdefault("timeout_s", 5)
    return HttpCrawlSource(id="site", kind="http_crawl", seeds=kw.pop("seeds", [base + "/"]), governance=GOV, **kw)


def crawl(source: HttpCrawlSource, state: dict | None = None, logs: list | None = None):
    crawler = Crawler(source, state or {}, clock=lambda: FIXED, log=(logs.append if logs is not None else None))
    items = list(crawler.run())
    return crawler, items


def by_status(items, status) -> dict:
    value = status.value if isinstance(status, Reason) else status
    return {i.item_id: i for i in items if i.status == value}


def merged(state: dict, crawler: Crawler) -> dict:
    return {**state, **crawler.state_updates}


@pytest.fixture
def site_server():
    site, requests = make_site(), []
    with serve_site(site, requests) as base:
        yield site, base, requests


def test_first_crawl_captures_every_allowed_page_and_accounts_for_refusals(site_server):
    site, base, requests = site_server
    crawler, items = crawl(make_source(base))
    captured = by_status(items, CAPTURED)
    assert list(captured) == [f"{base}/", f"{base}/a.html", f"{base}/b.html", f"{base}/search?q=1"]
    home = captured[f"{base}/"]
    assert home.content == site["/"][2]
    assert home.content_type == "text/html" and home.extra["charset"] == "utf-8"
    assert home.http_status == 200 and home.robots == "allowed" and home.etag
    assert home.retrieved_at == "2026-11-29T14:00:00.000000Z"
    refused = by_status(items, Reason.ROBOTS_DISALLOWED)
    assert list(refused) == [f"{base}/private/secret.html"]
    assert refused[f"{base}/private/secret.html"].robots == "disallowed"
    assert refused[f"{base}/private/secret.html"].content is None
    assert not any(path.startswith("/private/") for path, _ in requests)  # refused pages are never fetched
    assert [p for p, _ in requests].count("/robots.txt") == 1
    assert all(h["user-agent"] == "corpus-crawler/0.1" for _, h in requests)
    assert crawler.has_changes and crawler.finished
    assert crawler.stats.new == 4 and crawler.stats.refused_robots == 1 and crawler.stats.fetched == 4
    assert set(crawler.state_updates) == set(captured)
    entry = crawler.state_updates[f"{base}/a.html"]
    assert entry.status == "active" and entry.etag == captured[f"{base}/a.html"].etag
    assert entry.content_sha256 == hashlib.sha256(site["/a.html"][2]).hexdigest()


def test_unchanged_site_yields_no_documents_and_uses_conditional_requests(site_server):
    site, base, requests = site_server
    first, _ = crawl(make_source(base))
    requests.clear()
    second, items = crawl(make_source(base), first.state_updates)
    assert items == []  # links of 304 pages are not re-read, so the robots-refused page is not even reached
    assert not second.has_changes
    assert second.stats.not_modified == 4 and second.stats.new == second.stats.changed == 0
    assert second.state_updates == {}
    sent = dict(requests)
    assert sent["/a.html"]["if-none-match"] == first.state_updates[f"{base}/a.html"].etag


def test_only_the_changed_page_is_yielded(site_server):
    site, base, _ = site_server
    first, _ = crawl(make_source(base))
    site["/a.html"] = (200, HTML, page("/", text="page a, edited"))
    second, items = crawl(make_source(base), first.state_updates)
    assert [(i.item_id, i.status) for i in items if i.status != Reason.ROBOTS_DISALLOWED.value] == [
        (f"{base}/a.html", CAPTURED)
    ]
    assert by_status(items, CAPTURED)[f"{base}/a.html"].content == site["/a.html"][2]
    assert second.has_changes and second.stats.changed == 1 and second.stats.not_modified == 3
    assert list(second.state_updates) == [f"{base}/a.html"]
    assert second.state_updates[f"{base}/a.html"].content_sha256 != first.state_updates[f"{base}/a.html"].content_sha256


def test_same_bytes_without_validators_is_unchanged_and_last_modified_is_sent():
    lm = "Sun, 29 Nov 2026 12:00:00 GMT"
    site = {"/": (200, {"Content-Type": "text/html", "ETag": None, "Last-Modified": lm}, page(text="static"))}
    requests: list = []
    with serve_site(site, requests) as base:
        first, items = crawl(make_source(base, obey_robots=False))
        assert [i.robots for i in items] == ["not_applicable"]
        second, items = crawl(make_source(base, obey_robots=False), first.state_updates)
    assert items == [] and not second.has_changes
    assert second.stats.unchanged == 1 and second.state_updates == {}
    assert requests[-1][1]["if-modified-since"] == lm


@pytest.mark.parametrize("gone_status", [404, 410])
def test_page_gone_after_capture_is_reported_removed(site_server, gone_status):
    site, base, _ = site_server
    first, _ = crawl(make_source(base))
    site["/b.html"] = (gone_status, {"Content-Type": "text/plain"}, b"gone")
    second, items = crawl(make_source(base), first.state_updates)
    removed = by_status(items, Reason.SOURCE_REMOVED)
    assert list(removed) == [f"{base}/b.html"]
    assert removed[f"{base}/b.html"].http_status == gone_status and removed[f"{base}/b.html"].content is None
    assert second.state_updates[f"{base}/b.html"].status == "removed"
    assert second.has_changes and second.stats.removed == 1
    # A removed page is not revisited from state; when it comes back it is captured again as new.
    state = merged(first.state_updates, second)
    site["/b.html"] = (200, HTML, page(text="page b is back"))
    site["/"] = (200, HTML, page("/a.html", "/b.html", text="home, edited"))
    third, items = crawl(make_source(base), state)
    assert f"{base}/b.html" in by_status(items, CAPTURED)
    assert third.state_updates[f"{base}/b.html"].status == "active"


def test_404_for_a_never_seen_page_is_an_http_error_not_a_change():
    with serve_site({}) as base:
        crawler, items = crawl(make_source(base))
    assert [(i.status, i.http_status) for i in items] == [(Reason.HTTP_ERROR.value, 404)]
    assert not crawler.has_changes and crawler.state_updates == {}
    assert crawler.stats.errors == 1


def test_off_host_redirect_is_refused_and_on_host_redirect_followed():
    site = {
        "/": (200, HTML, page("/moved", "/away")),
        "/moved": (302, {"Location": "/target.html"}, b""),
        "/away": (302, {"Location": "http://localhost:{port}/target.html?token=secret"}, b""),
        "/target.html": (200, HTML, page(text="target")),
    }
    requests: list = []
    with serve_site(site, requests) as base:
        crawler, items = crawl(make_source(base, obey_robots=False))
    port = base.rsplit(":", 1)[1]
    captured = by_status(items, CAPTURED)
    assert list(captured) == [f"{base}/", f"{base}/target.html"]
    assert captured[f"{base}/target.html"].extra["redirected_from"] == f"{base}/moved"
    refused = by_status(items, Reason.REDIRECT_OFF_HOST)
    assert list(refused) == [f"{base}/away"]
    detail = refused[f"{base}/away"].status_detail
    assert f"localhost:{port}" in detail and "target" not in detail and "secret" not in detail
    assert refused[f"{base}/away"].http_status == 302 and refused[f"{base}/away"].content is None
    assert crawler.stats.refused_redirect == 1
    assert [p for p, _ in requests].count("/target.html") == 1  # followed once, not fetched again


def test_redirect_loop_stops_after_five_hops():
    site = {f"/r{i}": (302, {"Location": f"/r{i + 1}"}, b"") for i in range(10)}
    with serve_site(site) as base:
        crawler, items = crawl(make_source(base, seeds=[base + "/r0"], obey_robots=False))
    assert [(i.item_id, i.status) for i in items] == [(f"{base}/r0", Reason.HTTP_ERROR.value)]
    assert "redirects" in items[0].status_detail


@pytest.mark.parametrize("declared_length", [True, False])
def test_body_over_max_bytes_is_too_large_without_content(declared_length):
    headers = {"Content-Type": "text/html"}
    if not declared_length:
        headers["Content-Length"] = None  # close-delimited body: only the streaming limit can stop it
    site = {"/": (200, HTML, page("/huge.html", "/binary.html")),
            "/huge.html": (200, headers, b"<p>" + b"x" * 300_000 + b"</p>"),
            "/binary.html": (200, HTML, bytes(range(256)) * 8)}
    with serve_site(site) as base:
        crawler, items = crawl(make_source(base, obey_robots=False, max_bytes_per_page=100_000))
    too_large = by_status(items, Reason.TOO_LARGE)
    assert list(too_large) == [f"{base}/huge.html"] and too_large[f"{base}/huge.html"].content is None
    assert crawler.stats.too_large == 1 and f"{base}/huge.html" not in crawler.state_updates
    # binary bytes labelled text/html are captured byte-for-byte; canonicalization decides about them
    assert by_status(items, CAPTURED)[f"{base}/binary.html"].content == bytes(range(256)) * 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_is_a_fetch_error_and_unreachable_robots_disallows_the_host():
    base = f"http://127.0.0.1:{_free_port()}"
    crawler, items = crawl(make_source(base, obey_robots=False))
    assert [i.status for i in items] == [Reason.FETCH_ERROR.value]
    assert "ConnectError" in items[0].status_detail and not crawler.has_changes
    logs: list = []
    crawler, items = crawl(make_source(base), logs=logs)
    assert [(i.status, i.robots) for i in items] == [(Reason.ROBOTS_DISALLOWED.value, "disallowed")]
    assert "unreachable" in items[0].status_detail
    assert any("robots.txt unreachable" in line for line in logs)


@pytest.mark.parametrize("robots_status, allowed", [(404, True), (503, False)])
def test_robots_4xx_allows_all_and_5xx_disallows_all(robots_status, allowed):
    site = {"/robots.txt": (robots_status, {"Content-Type": "text/plain"}, b"Disallow: /"), "/": (200, HTML, page())}
    with serve_site(site) as base:
        _, items = crawl(make_source(base))
    expected = CAPTURED if allowed else Reason.ROBOTS_DISALLOWED.value
    assert [i.status for i in items] == [expected]


def test_link_extraction_keeps_only_http_links_without_fragments():
    body = page("b.html#x", "/c?q=1&r=2#frag", "mailto:a@b.org", "file:///etc/passwd", "javascript:void(0)",
                "ftp://host/file", "HTTPS://Example.COM/Path", "//other.org/x", "b.html")
    links = extract_links(body, "http://site.test/dir/a.html")
    assert links == ["http://site.test/dir/b.html", "http://site.test/c?q=1&r=2", "https://example.com/Path",
                     "http://other.org/x"]
    assert normalize_url("http://Site.Test") == "http://site.test/"
    assert normalize_url("http://h/a b?q=ü#x") == normalize_url("http://h/a%20b?q=%C3%BC") == "http://h/a%20b?q=%C3%BC"


def test_external_and_non_http_links_are_never_crawled(site_server):
    site, base, requests = site_server
    crawler, items = crawl(make_source(base))
    assert all(i.uri.startswith(base + "/") for i in items)
    assert [p for p, _ in requests] == ["/robots.txt", "/", "/a.html", "/b.html", "/search?q=1"]
    assert crawler.stats.fetched == 4  # /, a, b and the search page; nothing else was requested


def test_crawl_is_deterministic_and_bounded_by_max_pages(site_server):
    _, base, _ = site_server
    _, once = crawl(make_source(base))
    _, again = crawl(make_source(base))
    assert [i.item_id for i in once] == [i.item_id for i in again]
    crawler, items = crawl(make_source(base, max_pages=2))
    assert [i.item_id for i in items] == [f"{base}/", f"{base}/a.html"] and crawler.stats.fetched == 2


def test_known_pages_are_revisited_even_when_no_longer_linked(site_server):
    site, base, _ = site_server
    first, _ = crawl(make_source(base))
    site["/"] = (200, HTML, page(text="home without links"))
    site["/a.html"] = (410, {}, b"")
    second, items = crawl(make_source(base), first.state_updates)
    assert f"{base}/a.html" in by_status(items, Reason.SOURCE_REMOVED)
    assert second.stats.not_modified == 2  # b.html and the search page, reached from state only


def test_politeness_delay_spaces_requests_to_one_host():
    site = {"/": (200, HTML, page("/1", "/2")), "/1": (200, HTML, page()), "/2": (200, HTML, page())}
    requests: list = []
    with serve_site(site, requests) as base:
        start = time.monotonic()
        crawl(make_source(base, obey_robots=False, politeness_delay_s=0.1))
        elapsed = time.monotonic() - start
    assert len(requests) == 3 and elapsed >= 0.2


def test_progress_log_reports_counts_and_rate(site_server):
    _, base, _ = site_server
    logs: list = []
    crawl(make_source(base), logs=logs)
    assert "crawl done" in logs[-1] and "new=4" in logs[-1] and "pages/s" in logs[-1]


def test_a_crawler_runs_once(site_server):
    _, base, _ = site_server
    crawler, _ = crawl(make_source(base))
    with pytest.raises(RuntimeError):
        list(crawler.run())


# --- the real pydoc server ---------------------------------------------------------------------


@pytest.fixture
def pydoc_server():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pydoc", "-n", "127.0.0.1", "-p", str(port)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(base + "/", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("pydoc server did not start")
                time.sleep(0.05)
        yield base
    finally:
        proc.stdin.close()  # pydoc quits on EOF
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=5)


def test_crawl_of_real_pydoc_server(pydoc_server):
    base = pydoc_server
    logs: list = []
    crawler, items = crawl(make_source(base, max_pages=8), logs=logs)
    html = [i for i in by_status(items, CAPTURED).values() if i.content_type == "text/html"]
    assert len(html) >= 5
    assert all(i.uri.startswith(base + "/") and i.robots == "allowed" and i.content for i in html)
    assert crawler.stats.fetched == 8 and crawler.stats.refused_robots == 0
    # pydoc answers /robots.txt with an HTML error page: treated as "no rules", and said so
    assert any("robots.txt is text/html" in line and "allow all" in line for line in logs)
    # pydoc sends no validators, so a second crawl re-downloads and finds identical bytes
    active = {u: e for u, e in crawler.state_updates.items() if e.status == "active"}
    assert len(active) == 8 and any(e.status == "pending" for e in crawler.state_updates.values())
    second, items = crawl(make_source(base, max_pages=8), active)
    assert second.stats.new == 0 and second.stats.unchanged >= 5


def test_state_from_a_previous_run_drives_conditional_requests_and_change_detection(site_server):
    site, base, requests = site_server
    stored = {  # as storage would hand it back: a stale validator and an outdated digest
        f"{base}/a.html": CrawlStateEntry(uri=f"{base}/a.html", etag='"stale"', content_sha256="0" * 64),
        f"{base}/gone.html": CrawlStateEntry(uri=f"{base}/gone.html", etag='"x"', content_sha256="1" * 64),
    }
    crawler, items = crawl(make_source(base, seeds=[f"{base}/a.html"]), stored)
    assert dict(requests)["/a.html"]["if-none-match"] == '"stale"'
    # seed first, then known pages from state (sorted), then links discovered on the way
    assert [(i.item_id, i.status) for i in items[:3]] == [
        (f"{base}/a.html", CAPTURED), (f"{base}/gone.html", Reason.SOURCE_REMOVED.value), (f"{base}/", CAPTURED)
    ]
    assert crawler.stats.changed == 1 and crawler.stats.removed == 1
    assert crawler.state_updates[f"{base}/gone.html"].status == "removed"


def test_a_crawl_bounded_by_max_pages_keeps_growing_across_runs(site_server):
    """The frontier left when max_pages stops a crawl is persisted as 'pending' and crawled next time."""
    _, base, _ = site_server
    state: dict = {}
    seen: set = set()
    for _ in range(4):
        crawler, items = crawl(make_source(base, max_pages=2), state)
        seen |= set(by_status(items, CAPTURED))
        state = merged(state, crawler)
    assert seen == {f"{base}/", f"{base}/a.html", f"{base}/b.html", f"{base}/search?q=1"}
    assert {u: e.status for u, e in state.items()} == {
        **{u: "active" for u in seen}, f"{base}/private/secret.html": "refused"}
    # a pending page is new when it is finally fetched, not "changed"
    crawler, _ = crawl(make_source(base, max_pages=1), {})
    pending = {u for u, e in crawler.state_updates.items() if e.status == "pending"}
    assert pending == {f"{base}{p}" for p in ("/a.html", "/b.html", "/private/secret.html", "/search?q=1")}
    second, items = crawl(make_source(base, max_pages=2), merged({}, crawler))  # the seed (304), then a.html
    assert second.stats.not_modified == 1 and second.stats.new == 1 and second.stats.changed == 0
