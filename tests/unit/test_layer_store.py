"""The storage contract: versioned, atomically published, deterministic, owner-only where private."""

import stat

import pyarrow as pa
import pytest

from corpus_assets.domain.core.keys import InvalidKeyError
from corpus_assets.domain.storage.layer_store import LayerIntegrityError, LayerStore, TableSpec, plain_fields

SCHEMA = pa.schema([("i", pa.int64()), ("text", pa.string()), ("blob", pa.large_binary())])
TABLES = {"rows": TableSpec(SCHEMA), "secret": TableSpec(pa.schema([("k", pa.string())]), private=True)}


def _rows(n, size=50):
    return [{"i": i, "text": f"row {i} " + "x" * (i % size), "blob": bytes([i % 256]) * (i % 7)} for i in range(n)]


def _write(store, rows, batch, partition="p1"):
    with store.new_version("demo", partition, TABLES, {"spec": 1}) as w:
        for start in range(0, len(rows), batch):
            w.write("rows", rows[start : start + batch])
        w.write("secret", [{"k": "v"}])
        return w.commit()


def test_version_bytes_do_not_depend_on_caller_batch_size(tmp_path):
    rows = _rows(5000)
    a = _write(LayerStore(tmp_path / "a", rows_per_group=700, bytes_per_group=40_000), rows, batch=1)
    b = _write(LayerStore(tmp_path / "b", rows_per_group=700, bytes_per_group=40_000), rows, batch=999)
    assert a.content_digest == b.content_digest
    assert a.row_count("rows") == 5000
    assert a.read_table("rows").to_pylist() == rows
    # several row groups/files were really written (so the test exercises regrouping)
    assert len(a.manifest["tables"]["rows"]["files"]) >= 1
    import pyarrow.parquet as pq

    assert sum(pq.ParquetFile(p).num_row_groups for p in a.table_files("rows")) > 5


def test_current_pointer_only_moves_on_commit(tmp_path):
    store = LayerStore(tmp_path)
    first = _write(store, _rows(10), 3)
    assert store.current("demo", "p1").version == first.version
    with pytest.raises(RuntimeError):
        with store.new_version("demo", "p1", TABLES, {"spec": 2}) as w:
            w.write("rows", _rows(20))
            raise RuntimeError("crash in the middle of a build")
    # the failed build published nothing and left no staging directory behind
    assert store.current("demo", "p1").version == first.version
    assert not list((tmp_path / "layers/demo/p1").glob(".tmp-*"))
    # leaving the block without commit publishes nothing either
    with store.new_version("demo", "p1", TABLES, {"spec": 3}) as w:
        w.write("rows", _rows(30))
    assert store.current("demo", "p1").version == first.version
    second = _write(store, _rows(40), 7)
    assert store.current("demo", "p1").version == second.version != first.version
    assert set(store.versions("demo", "p1")) == {first.version, second.version}


def test_stale_staging_dir_from_a_killed_writer_is_invisible_and_cleaned(tmp_path):
    store = LayerStore(tmp_path)
    v = _write(store, _rows(5), 2)
    stale = tmp_path / "layers/demo/p1/.tmp-deadbeef"
    (stale / "rows").mkdir(parents=True)
    (stale / "rows/part-00000.parquet").write_bytes(b"partial")
    assert store.current("demo", "p1").version == v.version
    assert store.versions("demo", "p1") == [v.version]
    _write(store, _rows(6), 2)
    assert not stale.exists()


def test_private_tables_are_owner_only(tmp_path):
    v = _write(LayerStore(tmp_path), _rows(3), 3)
    secret_dir = v.root / "secret"
    assert stat.S_IMODE(secret_dir.stat().st_mode) == 0o700
    for p in v.table_files("secret"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "layers/demo/p1").stat().st_mode) == 0o700


def test_verify_detects_tampering(tmp_path):
    v = _write(LayerStore(tmp_path), _rows(100), 10)
    v.verify()
    path = v.table_files("rows")[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(LayerIntegrityError, match="does not match its manifest"):
        v.verify()


def test_identical_rebuild_reuses_the_version(tmp_path):
    store = LayerStore(tmp_path)
    a = _write(store, _rows(50), 5)
    b = _write(store, _rows(50), 50)
    assert a.version == b.version
    assert store.versions("demo", "p1") == [a.version]


def test_empty_table_is_a_valid_version(tmp_path):
    store = LayerStore(tmp_path)
    with store.new_version("demo", "empty", TABLES, {}) as w:
        v = w.commit()
    assert v.row_count("rows") == 0
    assert v.read_table("rows").num_rows == 0
    v.verify()


def test_schema_mismatch_is_a_clear_error(tmp_path):
    store = LayerStore(tmp_path)
    with pytest.raises(ValueError, match="does not match the declared schema"):
        with store.new_version("demo", "p", TABLES, {}) as w:
            w.write("rows", pa.table({"other": [1]}))


@pytest.mark.parametrize("bad", ["..", "../x", "a/b", ".hidden", "", "x" * 200, "a\x00b"])
def test_hostile_partition_keys_never_reach_the_filesystem(tmp_path, bad):
    store = LayerStore(tmp_path)
    with pytest.raises(InvalidKeyError):
        store.new_version("demo", bad, TABLES, {})
    assert not (tmp_path / "layers").exists() or not any((tmp_path / "layers").rglob("*.parquet"))


def test_rows_of_large_values_get_their_own_groups(tmp_path):
    store = LayerStore(tmp_path, rows_per_group=1000, bytes_per_group=1 << 20)
    big = [{"i": i, "text": "y" * (600_000 if i % 2 else 10), "blob": b""} for i in range(10)]
    v = _write(store, big, 3)
    import pyarrow.parquet as pq

    groups = [pq.ParquetFile(p).metadata.row_group(g).num_rows for p in v.table_files("rows") for g in range(pq.ParquetFile(p).num_row_groups)]
    assert sum(groups) == 10 and len(groups) >= 5


def test_row_groups_fill_greedily_by_count_and_bytes(tmp_path):
    """A group takes rows while it has fewer than rows_per_group and their sizes (string lengths,
    8 per other column) stay within bytes_per_group; a row larger than that starts a group alone."""
    schema = pa.schema([("text", pa.string())])
    sizes = [100, 100, 100, 500, 100, 2000, 50, 50, 50, 50, 50]  # row bytes: len(text) + 0 (one string column)
    store = LayerStore(tmp_path, rows_per_group=4, bytes_per_group=300)
    with store.new_version("demo", "p", {"rows": TableSpec(schema)}, {"spec": 1}) as w:
        for k in range(0, len(sizes), 2):  # caller batches of 2 rows
            w.write("rows", [{"text": "z" * n} for n in sizes[k:k + 2]])
        v = w.commit()
    import pyarrow.parquet as pq

    groups = [pq.ParquetFile(p).metadata.row_group(g).num_rows for p in v.table_files("rows")
              for g in range(pq.ParquetFile(p).num_row_groups)]
    assert groups == [3, 1, 1, 1, 4, 1]


def test_list_columns_are_written_without_a_dictionary(tmp_path):
    """Token ids and masks (list columns) are stored plain; scalar strings keep their dictionary."""
    import pyarrow.parquet as pq

    schema = pa.schema([("split", pa.string()), ("ids", pa.list_(pa.int32()))])
    store = LayerStore(tmp_path)
    with store.new_version("demo", "p", {"rows": TableSpec(schema)}, {"spec": 1}) as w:
        w.write("rows", [{"split": "train" if i % 3 else "test", "ids": [i % 50] * 20} for i in range(300)])
        v = w.commit()
    meta = pq.ParquetFile(v.table_files("rows")[0]).metadata.row_group(0)
    encodings = {meta.column(c).path_in_schema: set(meta.column(c).encodings) for c in range(meta.num_columns)}
    assert "RLE_DICTIONARY" in encodings["split"]
    ids = next(e for k, e in encodings.items() if k.startswith("ids"))
    assert "RLE_DICTIONARY" not in ids and "PLAIN_DICTIONARY" not in ids
    assert v.read_table("rows").column("ids").to_pylist()[7] == [7] * 20


def test_a_table_may_set_its_own_row_groups_and_plain_columns(tmp_path):
    """A narrow table written in its own, larger row groups (the store's other tables keep the
    store's), and a column of unique values written without a dictionary; bytes still do not depend
    on how the caller batched the rows."""
    import pyarrow.parquet as pq

    schema = pa.schema([("record_id", pa.string()), ("outcome", pa.string())])
    specs = {"narrow": TableSpec(plain_fields(schema, "record_id"), rows_per_group=5000), "wide": TableSpec(schema)}
    rows = [{"record_id": f"src:{i:06d}", "outcome": "kept" if i % 5 else "removed"} for i in range(7000)]

    def build(root, batch):
        store = LayerStore(root, rows_per_group=1000)
        with store.new_version("demo", "p", specs, {"spec": 1}) as w:
            for start in range(0, len(rows), batch):
                w.write("narrow", rows[start:start + batch])
                w.write("wide", rows[start:start + batch])
            return w.commit()

    v = build(tmp_path / "a", 700)

    def groups(table):
        return [pq.ParquetFile(p).metadata.row_group(g).num_rows for p in v.table_files(table)
                for g in range(pq.ParquetFile(p).num_row_groups)]

    assert groups("narrow") == [5000, 2000]
    assert groups("wide") == [1000] * 7
    meta = pq.ParquetFile(v.table_files("narrow")[0]).metadata.row_group(0)
    encodings = {meta.column(c).path_in_schema: set(meta.column(c).encodings) for c in range(meta.num_columns)}
    assert not encodings["record_id"] & {"RLE_DICTIONARY", "PLAIN_DICTIONARY"}
    assert "RLE_DICTIONARY" in encodings["outcome"]
    assert v.read_table("narrow").to_pylist() == rows
    other = build(tmp_path / "b", 3)
    assert [f["sha256"] for f in other.manifest["tables"]["narrow"]["files"]] == \
        [f["sha256"] for f in v.manifest["tables"]["narrow"]["files"]]


_KILL_WRITER = r"""
import sys, pyarrow as pa
from corpus_assets.domain.storage.layer_store import LayerStore, TableSpec
store = LayerStore(sys.argv[1], rows_per_group=100)
schema = pa.schema([("i", pa.int64()), ("text", pa.string())])
with store.new_version("demo", "p1", {"rows": TableSpec(schema)}, {"spec": "new"}) as w:
    i = 0
    while True:  # writes forever; the test kills it mid-version
        w.write("rows", [{"i": i + k, "text": "y" * 100} for k in range(100)])
        i += 100
        if i == 2000:
            print("writing", flush=True)
"""


def test_a_writer_killed_mid_version_leaves_the_current_version_intact(tmp_path):
    import signal
    import subprocess
    import sys

    store = LayerStore(tmp_path)
    old = _write(store, _rows(10), 5)
    proc = subprocess.Popen([sys.executable, "-c", _KILL_WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    # the partial version exists only as a staging directory; readers still get the old one, whole
    assert list((tmp_path / "layers/demo/p1").glob(".tmp-*"))
    current = store.require_current("demo", "p1")
    assert current.version == old.version
    current.verify()
    assert current.read_table("rows").to_pylist() == _rows(10)


def _concurrent_commits(store, rows_a, rows_b):
    """Two writers of one partition that both started before either committed; a commits first."""
    wa = store.new_version("demo", "p1", TABLES, {"spec": "a"})
    wb = store.new_version("demo", "p1", TABLES, {"spec": "b"})  # a's staging is live: kept
    wb.write("rows", rows_b)
    wb.write("secret", [{"k": "v"}])
    with wa:
        wa.write("rows", rows_a)
        wa.write("secret", [{"k": "v"}])
        va = wa.commit()
    return va, wb.commit


def test_a_writer_that_started_before_another_commit_does_not_undo_it(tmp_path):
    """A version built while someone else (a purge, another run) moved CURRENT is refused with
    ConcurrentUpdateError instead of silently replacing theirs; it stays stored, not current."""
    from corpus_assets.domain.storage.layer_store import ConcurrentUpdateError

    store = LayerStore(tmp_path)
    base = _write(store, _rows(5), 5)
    va, commit_b = _concurrent_commits(store, _rows(10), _rows(20))
    with pytest.raises(ConcurrentUpdateError, match=f"moved from {base.version} to {va.version}"):
        commit_b()
    assert store.current_version_name("demo", "p1") == va.version
    assert len(store.versions("demo", "p1")) == 3  # base, a and the refused b, all stored
    # a writer that starts now builds on the new state and commits
    assert _write(store, _rows(20), 7).version == store.current_version_name("demo", "p1")
    # two writers producing the same content do not conflict: the second finds its own version current
    va, commit_b = _concurrent_commits(store, _rows(30), _rows(30))
    assert commit_b().version == va.version == store.current_version_name("demo", "p1")


def test_a_table_declared_counted_has_its_value_counts_in_the_manifest(tmp_path):
    """Counts over ``count_by`` columns, kept in the manifest at commit: over every write and every
    adopted file, equal to counting the committed table (so a reader of totals needs no table read)."""
    from collections import Counter

    schema = pa.schema([("stage", pa.string()), ("outcome", pa.string()), ("reason", pa.string()), ("n", pa.int64())])
    spec = {"d": TableSpec(schema, count_by=("stage", "outcome", "reason"))}
    rows = [{"stage": "s", "outcome": ["accepted", "rejected"][i % 2], "reason": [None, "", "r1", "r2"][i % 4], "n": i}
            for i in range(50)]
    store = LayerStore(tmp_path)
    with store.new_version("a", "p", spec, {}) as w:
        w.write("d", rows[:20])
        w.write("d", rows[20:])
        first = w.commit()
    with store.new_version("a", "q", spec, {}) as w:
        f = first.manifest["tables"]["d"]["files"][0]
        w.table("d").adopt(first.root / f["path"], rows=50, sha256=f["sha256"], size=f["bytes"])
        w.write("d", rows[:7])
        second = w.commit()
    for v in (first, second):
        meta = v.manifest["tables"]["d"]["counts"]
        assert meta["by"] == ["stage", "outcome", "reason"]
        t = v.read_table("d").to_pylist()
        want = Counter((r["stage"], r["outcome"], r["reason"]) for r in t)
        assert {tuple(r[:3]): r[3] for r in meta["rows"]} == dict(want)
        assert sum(r[3] for r in meta["rows"]) == len(t) and meta["rows"] == sorted(
            meta["rows"], key=lambda r: tuple((x is not None, x) for x in r[:3]))
    # a table without count_by has none
    with store.new_version("a", "r", {"d": TableSpec(schema)}, {}) as w:
        w.write("d", rows)
        assert "counts" not in w.commit().manifest["tables"]["d"]
