"""Start and stop Python's own ``pydoc`` HTML server on 127.0.0.1: the demo's documentation site.

pydoc quits when its stdin reaches EOF, so we hold a pipe open; it is stopped by PID.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from typing import Iterator, Optional


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _restore_signals() -> None:
    # Shells may start us with SIGINT/SIGTERM ignored; children inherit that unless reset.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def pydoc_server(port: Optional[int] = None, timeout_s: float = 30.0) -> Iterator[str]:
    """Yield the base URL of a running ``python -m pydoc -n 127.0.0.1 -p PORT`` server."""
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pydoc", "-n", "127.0.0.1", "-p", str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_restore_signals if os.name == "posix" else None,
    )
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"pydoc server exited with code {proc.returncode} (port {port} in use?)")
            try:
                with urllib.request.urlopen(base, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"pydoc server on port {port} did not answer within {timeout_s}s")
            time.sleep(0.1)
        yield base
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
