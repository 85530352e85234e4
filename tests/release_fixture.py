"""A small two-source release (documents + conversations) built through Dagster, shared by the
release-level pipeline tests."""

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path


from conftest import write_sources
from corpus_assets.domain.core.keys import snapshot_key

FIXTURE_TOKENIZER = Path(__file__).resolve().parent / "data" / "tokenizer" / "tiny_bpe.json"
TOKENIZER = f"tokenizer: {{path: '{FIXTURE_TOKENIZER}', special_tokens: ['<|endoftext|>', '<|pad|>'], eos_token: '<|endoftext|>'}}\n"
EOS_ID = 0  # <|endoftext|> in the fixture tokenizer
T0 = datetime(2026, 11, 29, 14, 0, tzinfo=timezone.utc)

DOCS = {
    "gc": (
        "The garbage collector in CPython complements reference counting by finding reference cycles. "
        "Objects that refer to each other in a loop never reach a reference count of zero, so the cycle "
        "detector periodically walks the container objects of each generation, subtracts internal "
        "references and frees whatever is unreachable from outside the group. Generations keep the cost "
        "low because most objects die young, and the thresholds can be tuned with the gc module. Calling gc.collect() forces a full collection. "
        "Debug flags print what the collector finds."
    ),
    "venv": (
        "A virtual environment isolates the packages of one project from every other project on the same "
        "machine. It holds its own interpreter link, its own site packages folder and its own scripts, so "
        "installing a library for one application never changes what another application imports. Create "
        "one with the venv module, activate it in the shell, and record the exact versions you depend on. "
        "Delete the folder to start over. Never commit it to version control."
    ),
    "logging": (
        "The logging module lets a library report what it is doing without deciding where the messages go. "
        "Each module asks for a logger named after itself, and the application configures handlers once at "
        "start up: a file for the operators, the console for developers, perhaps a network service for the "
        "whole fleet. Levels filter the noise, and formatters add the time, the module and the line number. "
        "Warnings go to stderr by default. Tests can capture the records and assert on them."
    ),
    "pathlib": (
        "Paths are objects in modern Python code. The pathlib module joins parts with the slash operator, "
        "reads and writes whole files with one call, lists a folder with glob patterns and resolves links. "
        "Because a path knows whether it is absolute, scripts stop concatenating strings by hand and stop "
        "breaking when they run on another operating system with a different separator between folders. "
        "Temporary files still come from tempfile. Old code that uses os.path keeps working."
    ),
}
ITERTOOLS = (
    "Iterators are lazy. The itertools module builds new iterators out of old ones without materializing "
    "anything: chain glues sequences end to end, islice takes a window, groupby collects runs of equal keys "
    "and product walks every combination of several inputs. Because nothing is computed until a consumer "
    "asks for the next item, pipelines of these helpers process files larger than memory. Recipes in the "
    "documentation show how to batch, pairwise compare and round robin. Each helper is written in C."
)
CHATS = [
    {"id": "c1", "messages": [
        {"role": "system", "content": "You are a concise assistant for Python developers."},
        {"role": "user", "content": "How do I read a file line by line without loading it all into memory?"},
        {"role": "assistant", "content": "Iterate over the file object: it yields one line at a time, so memory stays bounded."}]},
    {"id": "c2", "messages": [
        {"role": "user", "content": "What is the difference between a list and a tuple?"},
        {"role": "assistant", "content": "A list is mutable and a tuple is immutable; tuples can be dictionary keys."}]},
]


def setup_release(tmp_path, monkeypatch, release_body: str, extra_docs=None, extra_sources: str = "", sources_line=None):
    for d in ("docs", "chat"):
        (tmp_path / d).mkdir(exist_ok=True)
    docs = dict(DOCS, **(extra_docs or {}))
    (tmp_path / "docs" / "docs.jsonl").write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()))
    (tmp_path / "chat" / "chat.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CHATS))
    gov = "governance: {license: CC0-1.0, rights_evidence: https://example.org/rights}"
    write_sources(tmp_path / "sources.yaml", f"""
sources:
  - id: site_docs
    kind: jsonl
    root: {tmp_path / 'docs'}
    include: ["*.jsonl"]
    adapter: text_document
    {gov}
  - id: site_chat
    kind: jsonl
    root: {tmp_path / 'chat'}
    include: ["*.jsonl"]
    adapter: openai_messages
    {gov}
""" + extra_sources)
    rel = tmp_path / "releases"
    rel.mkdir(exist_ok=True)
    sources_line = sources_line or "snapshots: {sources: [site_docs, site_chat]}\n"
    (rel / "r1.yaml").write_text("name: r1\n" + sources_line + release_body)
    monkeypatch.setenv("CORPUS_RELEASES", str(rel))
    return rel


def build_snapshots(defs, instance, minute=0, sources=("site_docs", "site_chat")):
    assert defs.resolve_job_def("registry_job").execute_in_process(instance=instance).success
    for i, src in enumerate(sources):
        key = snapshot_key(src, T0 + timedelta(minutes=minute + i))
        instance.add_dynamic_partitions("snapshots", [key])
        assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success


def run_release(defs, instance, name="r1", **kw):
    instance.add_dynamic_partitions("releases", [name])
    return defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key=name, **kw)


def step_failure(result) -> str:
    msgs = []
    for ev in result.all_events:
        if ev.event_type_value == "STEP_FAILURE":
            error = ev.event_specific_data.error
            while error is not None:
                msgs.append(error.message)
                error = error.cause
    return "\n".join(msgs)


def tick_until_applied(defs, instance, cat, request_ids, max_ticks=12):
    """Tick the deletion sensor, running every run it requests in process, until every request is
    applied; the run keys launched, in order."""
    import dagster as dg

    from corpus_assets.domain.deletion.requests import get

    sensor = defs.resolve_sensor_def("deletion_requests")
    launched = []
    for _ in range(max_ticks):
        ctx = dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def())
        result = sensor(ctx)
        for rr in result.run_requests or []:
            launched.append(rr.run_key)
            job = defs.resolve_job_def(rr.job_name)
            kwargs = {"partition_key": rr.partition_key} if rr.partition_key else {}
            run = job.execute_in_process(instance=instance, run_config=rr.run_config or {}, tags=rr.tags, **kwargs)
            assert run.success, rr.run_key
        if all(get(cat, r).status == "applied" for r in request_ids):
            return launched
    raise AssertionError(f"not applied after {max_ticks} ticks: {[(r, get(cat, r).status) for r in request_ids]}")
