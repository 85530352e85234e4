"""Starting and stopping the real servers the tests run (webserver, daemon, Dask workers).

Each server leads its own process group (``start_new_session``), with default SIGINT/SIGTERM
handlers (a shell that ignores them would pass that on, see DAGSTER_NOTES.md), so the test can
stop it and everything it spawned by the group id and check that nothing is left.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start_in_group(cmd: list[str], *, cwd: Path, env: dict, log_path: Path) -> subprocess.Popen:
    """``cmd`` as the leader of a new process group, output to ``log_path``."""
    with open(log_path, "wb") as out:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=default_signals)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM the whole process group, SIGKILL what outlives ``timeout``, and assert that nothing
    of the group is left."""
    pgid = proc.pid
    if proc.poll() is None or group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while (proc.poll() is None or group_alive(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.poll() is None or group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        end = time.monotonic() + 5
        while group_alive(pgid) and time.monotonic() < end:
            time.sleep(0.1)
    assert proc.poll() is not None, f"pid {proc.pid} still running"
    assert not group_alive(pgid), f"processes of group {pgid} still running"


def tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"
