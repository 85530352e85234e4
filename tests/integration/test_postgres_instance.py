"""deploy/dagster.postgres.yaml for real: a PostgreSQL server started by the test (Debian's
``postgresql`` package, installed by .ci/run), the Dagster instance built from the shipped file with
its connection from DAGSTER_PG_*, and captures plus a release run on it.

Skipped where no PostgreSQL server binaries or no ``dagster-postgres`` are installed (it is not a
corpus dependency), unless CORPUS_REQUIRE_POSTGRES=1 (CI), which makes that a failure."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import dagster as dg
import pytest

from release_fixture import TOKENIZER, build_snapshots, run_release, setup_release

PROJECT = Path(__file__).resolve().parents[2]
BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 512}\n")


def _missing(why: str):
    if os.environ.get("CORPUS_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"CORPUS_REQUIRE_POSTGRES=1 but {why}")
    pytest.skip(why)


def _server_bin() -> Path | None:
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True):
        if (Path(d) / "initdb").is_file():
            return Path(d)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres():
    """A throwaway PostgreSQL server on 127.0.0.1 (trust authentication), its data in a temporary
    directory; as root it runs as the ``postgres`` user the package created (initdb refuses root)."""
    bindir = _server_bin()
    if bindir is None:
        _missing("no PostgreSQL server binaries (apt-get install postgresql)")
    try:
        import dagster_postgres  # noqa: F401
    except ImportError:
        _missing("dagster-postgres is not installed (pip install 'dagster-postgres==0.29.27')")
    prefix: list[str] = []
    data = Path(tempfile.mkdtemp(prefix="corpus-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            _missing("running as root and there is no postgres user to run the server as")
        os.chown(data, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    run(str(bindir / "initdb"), "-D", str(data / "db"), "-A", "trust", "-U", "postgres")
    run(str(bindir / "pg_ctl"), "-D", str(data / "db"), "-l", str(data / "server.log"), "-w",
        "-o", f"-p {port} -h 127.0.0.1 -k {data}", "start")
    try:
        run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "corpus")
        yield {"host": "127.0.0.1", "port": port, "db": "corpus"}
    finally:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data / "db"), "-m", "immediate", "stop"],
                       capture_output=True, timeout=120)
        shutil.rmtree(data, ignore_errors=True)


def test_the_shipped_postgres_instance_config_runs_captures_and_a_release(postgres, corpus_env, tmp_path, monkeypatch):
    config = (PROJECT / "deploy" / "dagster.postgres.yaml").read_text()
    # the file's own settings; only the port differs from the default 5432 (the test's own server)
    (corpus_env / "dagster" / "dagster.yaml").write_text(config.replace("port: 5432", f"port: {postgres['port']}"))
    monkeypatch.setenv("DAGSTER_PG_HOST", postgres["host"])
    monkeypatch.setenv("DAGSTER_PG_USER", "postgres")
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "unused-with-trust")
    monkeypatch.setenv("DAGSTER_PG_DB", postgres["db"])
    setup_release(tmp_path, monkeypatch, BODY)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.DagsterInstance.get() as instance:
        from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage

        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.run_storage, PostgresRunStorage)
        build_snapshots(defs, instance)
        result = run_release(defs, instance)
        assert result.success
        # what the sensors and the UI read back from Postgres: the partitions and the materializations
        snapshots = instance.get_dynamic_partitions("snapshots")
        assert sorted(k.split(".")[0] for k in snapshots) == ["site_chat", "site_docs"]
        assert instance.get_dynamic_partitions("releases") == ["r1"]
        record = instance.get_latest_materialization_event(dg.AssetKey("release_manifest"))
        assert record is not None and record.run_id == result.run_id
        assert record.asset_materialization.partition == "r1"
    # nothing of the instance went to SQLite files under DAGSTER_HOME
    assert not list((corpus_env / "dagster").rglob("*.db"))
