"""Real pages through a corpus's life: capture, edit and remove pages, capture again, three builds
each consumed by a run, a content takedown with near duplicates, then every byte under
CORPUS_HOME searched for the taken-down text (tests/corpus_bytes.py).

Data: the first 60 pages of the Debian handbook (en-US) that bench/fetch_debian_docs.sh unpacked,
as a local_dir source. Prints what the release saw, what the takedown revoked, and how many files
hold the text before and after. Not a benchmark of speed: a check on pages nobody here wrote.

    .venv/bin/python bench/real_pages_lifecycle.py [--work DIR]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    # all work in main(): with CORPUS_RELEASE_WORKERS > 1 the release engine's worker processes
    # are spawned and re-import this file, which must then do nothing (it would wipe CORPUS_HOME)
    PROJECT = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=None, help="working folder (default: a temporary one)")
    args = ap.parse_args()
    ROOT = Path(args.work or tempfile.mkdtemp(prefix="corpus-lifecycle-"))
    home = ROOT / "home"
    shutil.rmtree(home, ignore_errors=True)
    site = ROOT / "site"
    shutil.rmtree(site, ignore_errors=True)
    src = PROJECT / "bench" / "data" / "root" / "usr" / "share" / "doc" / "debian-handbook" / "html" / "en-US"
    if not src.is_dir():
        sys.exit(f"no pages under {src}: run bench/fetch_debian_docs.sh first")
    site.mkdir(parents=True)
    pages = sorted(p for p in src.glob("*.html"))[:60]
    for p in pages:
        shutil.copy(p, site / p.name)
    (home / "dagster").mkdir(parents=True)
    os.environ.update(CORPUS_HOME=str(home), DAGSTER_HOME=str(home / "dagster"),
                      CORPUS_CURATION=str(PROJECT / "curation.yaml"))
    (ROOT / "sources.yaml").write_text(f"""
    sources:
      - id: handbook
        kind: local_dir
        root: {site}
        governance: {{license: GPL-2.0-or-later, rights_evidence: https://debian-handbook.info/}}
    """)
    os.environ["CORPUS_SOURCES"] = str(ROOT / "sources.yaml")
    rel = ROOT / "releases"
    shutil.rmtree(rel, ignore_errors=True)
    rel.mkdir()
    TOK = str(PROJECT / "tests" / "data" / "tokenizer" / "tiny_bpe.json")
    base = ("name: hb\nsnapshots: {sources: [handbook]}\nsplit: {fractions: [0.8, 0.1, 0.1]}\n"
            f"tokenizer: {{path: '{TOK}', special_tokens: ['<|endoftext|>', '<|pad|>'], eos_token: '<|endoftext|>'}}\n"
            "packing: {seq_len: 512, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 65536}\n")
    (rel / "hb.yaml").write_text(base)
    os.environ["CORPUS_RELEASES"] = str(rel)
    sys.path.insert(0, str(PROJECT / "tests"))
    import dagster as dg
    from corpus_assets.cli import main as corpus
    from corpus_assets.definitions import build_definitions
    from corpus_assets.domain.storage.layer_store import LayerStore
    from corpus_assets.domain.release.registry import registry
    from corpus_assets.domain.storage.catalog import Catalog
    from corpus_assets.domain.deletion.requests import get
    from corpus_bytes import find_text, tokenizers_under
    from release_fixture import tick_until_applied

    defs = build_definitions()
    instance = dg.DagsterInstance.get()
    assert defs.resolve_job_def("registry_job").execute_in_process(instance=instance).success
    t0 = time.time()
    assert corpus(["snapshot", "handbook"]) == 0
    store = LayerStore(home)
    first = sorted(store.partitions("curated_records"))[-1]
    cur = {r["record_id"]: r for r in store.require_current("curated_records", first).read_table("records").to_pylist()}
    dec = store.require_current("canonical_records", first).read_table("decisions").to_pylist()
    print("snapshot 1:", first, "items", len(dec), "canonical outcomes", {o: sum(d["outcome"] == o for d in dec) for o in {d["outcome"] for d in dec}}, "curated accepted", len(cur), f"{time.time()-t0:.1f}s")
    ids = sorted(cur)
    removed, edited, taken = ids[3], ids[7], ids[11]
    print("remove", removed, "edit", edited, "take down", taken)
    (site / removed.split(":", 1)[1].split("/")[-1]).unlink() if (site / removed.split(":", 1)[1].split("/")[-1]).exists() else print("?? path", removed)
    ep = site / edited.split(":", 1)[1].split("/")[-1]
    ep.write_text("<html><head><title>Moved</title></head><body><p>This page has moved.</p></body></html>")
    time.sleep(1.1)
    assert corpus(["snapshot", "handbook"]) == 0
    instance.add_dynamic_partitions("releases", ["hb"])
    cat = Catalog.at(home / "catalog.duckdb")
    for n in range(3):
        (rel / "hb.yaml").write_text(base + f"description: build {n}\n")
        t = time.time()
        assert defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key="hb").success
        assert corpus(["consume", "hb", "--run-id", f"run-{n}"]) == 0
        print(f"build {n}: {time.time()-t:.1f}s")
    views = store.require_current("token_views", "hb").read_table("views", columns=["record_id"]).column(0).to_pylist()
    print("removed in views:", removed in views, "edited in views:", edited in views, "taken in views:", taken in views)
    text = cur[taken]["text"]
    needles = [" ".join(text.split()[i:i + 8]) for i in (10, 40, 80) if len(text.split()) > i + 8]
    toks = tokenizers_under(home, [Path(TOK)])
    before = find_text(home, needles, toks)
    print("before: files holding the text:", len(before))
    (ROOT / "notice.txt").write_text(text)
    assert corpus(["delete", "--content-file", str(ROOT / "notice.txt"), "--near-duplicates", "--near-threshold", "0.8",
                   "--requester", "legal@example.org", "--reason", "takedown"]) == 0
    from corpus_assets.domain.deletion.requests import pending
    req = pending(cat)[0].request_id
    t = time.time()
    tick_until_applied(defs, instance, cat, [req])
    import json
    detail = json.loads(get(cat, req).status_detail)
    print(f"applied in {time.time()-t:.1f}s: builds revoked {sum(len(v) for v in detail['revoked'].values())}, affected runs {detail['affected_runs']}")
    print("registry:", [(r["build_id"][:12], r["status"]) for r in registry(cat, "hb")])
    after = find_text(home, needles, toks)
    print("after: files holding the text:", after)


if __name__ == "__main__":
    main()
