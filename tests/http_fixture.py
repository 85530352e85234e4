"""A real local HTTP server over an in-memory, mutable site, for crawler tests.

``site`` maps a request path (with query string) to ``(status, headers, body)``. Tests mutate the
dict between crawls to simulate edits and removals. Behaviour that matters to the crawler:
- 2xx responses get a strong ETag derived from the body unless ``headers`` sets ``ETag`` (None
  removes it); a matching ``If-None-Match`` answers 304;
- header values may contain ``{port}`` / ``{base}`` (filled in at serve time, e.g. a redirect to
  ``http://localhost:{port}/x`` which is a different host:port than ``127.0.0.1:{port}``);
- ``Content-Length: None`` omits the header (close-delimited body, so only streaming limits help);
- unknown paths answer 404; every request is appended to ``requests`` as (path, headers dict).
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator, Optional

Site = dict[str, tuple[int, dict, bytes]]


def _handler(site: Site, requests: list, base: dict) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            status, headers, body = site.get(self.path, (404, {"Content-Type": "text/plain"}, b"not found"))
            headers = dict(headers)
            if 200 <= status < 300 and "ETag" not in headers:
                headers["ETag"] = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            etag = headers.get("ETag")
            if etag is not None and 200 <= status < 300 and self.headers.get("If-None-Match") == etag:
                status, body = 304, b""
            headers.setdefault("Content-Length", str(len(body)))
            try:
                self.send_response(status)
                for key, value in headers.items():
                    if value is not None:
                        self.send_header(key, value.format(port=base["port"], base=base["url"]))
                self.end_headers()
                if status != 304:
                    self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the crawler may hang up on purpose (size limit)

        def log_message(self, *args) -> None:
            pass

    return Handler


@contextmanager
def serve_site(site: Site, requests: Optional[list] = None) -> Iterator[str]:
    """Serve ``site`` on 127.0.0.1 (free port) in a daemon thread; yields the base URL without a trailing slash."""
    base: dict = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site, requests if requests is not None else [], base))
    server.daemon_threads = True
    base["port"] = server.server_address[1]
    base["url"] = f"http://127.0.0.1:{base['port']}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield base["url"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
