"""Starting and stopping the real servers the tests run (webserver, daemon, Dask workers).

Each server leads its own process group (``start_new_session``), with default SIGINT/SIGTERM
handlers (a shell that ignores them would pass that on, see DAGSTER_NOTES.md), so the test can
stop it and everything it spawned by the group id and check that nothing is left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
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


def start_webserver(port: int, cwd: Path, env: dict, log_path: Path) -> subprocess.Popen:
    """dagster-webserver on 127.0.0.1:port over cwd/workspace.yaml, leader of its own process group."""
    webserver = Path(sys.executable).parent / "dagster-webserver"
    return start_in_group([str(webserver), "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
                          cwd=cwd, env=env, log_path=log_path)


def wait_for_webserver(proc: subprocess.Popen, port: int, log_path: Path, timeout: float = 120) -> None:
    """Until ``/server_info`` answers 200; fails with the server's log if it exits or times out."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"dagster-webserver exited with {proc.returncode}:\n{tail(log_path)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"dagster-webserver did not answer /server_info in {timeout}s:\n{tail(log_path)}")
        time.sleep(0.3)


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    """POST a query to the webserver's GraphQL endpoint; assert it has no errors; return ``data``."""
    payload = {"query": query, **({"variables": variables} if variables is not None else {})}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = json.loads(r.read())
    assert "errors" not in body, body
    return body["data"]


def wait_for_marker(marker: Path, proc: subprocess.Popen, what: str, timeout: float = 180) -> None:
    """Until ``marker`` exists (a pause point reached); fails with the process's stderr if it ends first."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr is not None else ""
            err = err.decode(errors="replace") if isinstance(err, bytes) else err
            raise AssertionError(f"process ended before {what}: {err[-3000:]}")
        assert time.monotonic() < deadline, f"{what} not reached in time"
        time.sleep(0.05)


def kill_at_pause_point(cmd: list[str], point: str, marker: Path, *, env: dict, cwd: Path | None = None,
                        timeout: float = 240) -> subprocess.Popen:
    """Run ``cmd`` with the fault-injection pause point ``point`` armed (domain/core/faults.py), wait
    until it reports reaching it in ``marker``, then SIGKILL its whole process group (a step may
    run in a child of the command). Returns the finished process."""
    env = dict(env, CORPUS_PAUSE_AT=point, CORPUS_PAUSE_FILE=str(marker))
    env.setdefault("CORPUS_PAUSE_SECONDS", str(int(timeout) + 60))
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_marker(marker, proc, point, timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    return proc
