"""Typed records: envelope + payload validation, text views, digests, Arrow rows."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pydantic import ValidationError

from corpus_assets.domain.core.hashing import canonical_digest, dedup_key, sha256_text
from corpus_assets.domain.canonical.records import (
    PAYLOAD_ADAPTER,
    RECORDS_SCHEMA,
    SCHEMA_VERSIONS,
    DocumentPayload,
    InstructionPayload,
    Message,
    MessagesPayload,
    PreferencePayload,
    ReasoningPayload,
    Record,
    TaskPayload,
    langid_view,
    raw_parent_id,
    record_digest,
    record_digest_input,
    record_to_row,
    row_to_record,
    text_view,
)
from corpus_assets.domain.ingest.sources_config import Governance

GOV = Governance(license="CC-BY-4.0", rights_evidence="https://example.org/license")


def _record(payload, **over) -> Record:
    fields = dict(
        record_id="src:r1",
        source_id="src",
        snapshot="src.20260101T000000",
        item_id="a.jsonl#L1",
        schema_type=payload.kind,
        schema_version=SCHEMA_VERSIONS[payload.kind],
        adapter="test",
        adapter_version="1",
        domain="prose",
        lang="en",
        lang_score=0.93,
        group_id="g1",
        parents=[raw_parent_id("src", "a.jsonl#L1")],
        governance=GOV,
        payload=payload,
    )
    fields.update(over)
    rec = Record.model_validate(fields)
    tv = text_view(rec)
    rec.text_sha256 = sha256_text(tv)
    rec.dedup_key = dedup_key(tv, rec.domain)
    rec.raw_sha256 = "0" * 64
    rec.record_sha256 = record_digest(rec)
    return rec


def _tool_conversation(*extra):
    return [
        {"role": "user", "content": "Weather in Lisbon and Porto?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "name": "weather", "arguments": '{"city": "Lisbon"}'},
                {"id": "c2", "name": "weather", "arguments": '{"city": "Porto"}'},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 19}'},
        {"role": "tool", "tool_call_id": "c2", "content": '{"temp": 16}'},
        {"role": "assistant", "content": "Lisbon 19 °C, Porto 16 °C."},
        *extra,
    ]


# --- messages and tool-call pairing -----------------------------------------------------------


def test_paired_parallel_tool_calls_validate():
    p = MessagesPayload.model_validate({"messages": _tool_conversation()})
    assert [m.role for m in p.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert p.messages[1].tool_calls[1].name == "weather"


@pytest.mark.parametrize(
    "messages, fragment",
    [
        # a tool result that answers no call
        ([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "nope", "content": "1"}], "answers no earlier"),
        # a result before its call
        (
            [
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "c1", "content": "1"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
            ],
            "answers no earlier",
        ),
        # two results for one call
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "1"},
                {"role": "tool", "tool_call_id": "c1", "content": "2"},
            ],
            "already has a result",
        ),
        # duplicate call ids
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}, {"id": "c1", "name": "g", "arguments": "{}"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "1"},
            ],
            "not unique",
        ),
        # a call never answered
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
            ],
            "without a result",
        ),
        # tool calls on a user message
        ([{"role": "user", "content": "x", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]}], "only assistant"),
        # tool message without the id it answers
        ([{"role": "user", "content": "x"}, {"role": "tool", "content": "1"}], "needs the tool_call_id"),
        # arguments that are not JSON
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{city: Lisbon"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "1"},
            ],
            "JSON text",
        ),
        # unknown role, empty list, empty content
        ([{"role": "function", "content": "x"}], "Input should be"),
        ([], "at least 1"),
        ([{"role": "user", "content": "   "}], "no content"),
    ],
)
def test_message_violations_raise_value_errors(messages, fragment):
    with pytest.raises(ValidationError) as exc:
        MessagesPayload.model_validate({"messages": messages})
    assert fragment in str(exc.value)
    assert isinstance(exc.value, ValueError)


def test_preference_payload_shares_one_prompt_and_needs_two_different_answers():
    p = PreferencePayload.model_validate(
        {
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 404?"}],
            "chosen": {"role": "assistant", "content": "Not Found."},
            "rejected": {"role": "assistant", "content": "Server crashed."},
        }
    )
    tv = text_view(_record(p))
    assert tv.count("What is 404?") == 1  # one shared prompt, never two texts
    assert tv.index("[chosen]") < tv.index("Not Found.") < tv.index("[rejected]") < tv.index("Server crashed.")
    for bad, fragment in [
        ({"chosen": {"role": "assistant", "content": "Same."}, "rejected": {"role": "assistant", "content": "Same."}}, "identical"),
        ({"chosen": {"role": "user", "content": "A"}, "rejected": {"role": "assistant", "content": "B"}}, "plain assistant"),
    ]:
        with pytest.raises(ValidationError, match=fragment):
            PreferencePayload.model_validate({"prompt": [{"role": "user", "content": "Q?"}], **bad})
    with pytest.raises(ValidationError, match="end with a user"):
        PreferencePayload.model_validate(
            {
                "prompt": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A"}],
                "chosen": {"role": "assistant", "content": "x"},
                "rejected": {"role": "assistant", "content": "y"},
            }
        )


def test_reasoning_keeps_process_answer_and_verdict_apart():
    p = ReasoningPayload(problem="2+2?", process="Add two and two.", answer="4", verdict="correct")
    assert (p.process, p.answer, p.verdict) == ("Add two and two.", "4", "correct")
    assert ReasoningPayload(problem="a", process="b", answer="c").verdict == "unverified"
    with pytest.raises(ValidationError):
        ReasoningPayload(problem="a", process="b", answer="c", verdict="probably")
    assert "correct" not in text_view(_record(p))  # the verdict is metadata, not text


def test_task_payload_has_no_reference_field():
    assert "reference" not in TaskPayload.model_fields
    with pytest.raises(ValidationError):
        TaskPayload.model_validate({"input": "Compute gcd(4, 6).", "reference": "2"})
    with pytest.raises(ValidationError, match="plain JSON"):
        TaskPayload(input="x", metadata={"score": float("nan")})


def test_record_envelope_checks_schema_and_record_id():
    p = DocumentPayload(text="hello")
    with pytest.raises(ValidationError, match="does not match payload kind"):
        _record(p, schema_type="messages")
    with pytest.raises(ValidationError, match="source_id"):
        _record(p, record_id="other:r1")
    with pytest.raises(ValidationError):
        _record(p, domain="poetry")


# --- text views -------------------------------------------------------------------------------


def test_text_views_per_kind():
    msgs = _record(MessagesPayload.model_validate({"messages": _tool_conversation()}))
    tv = text_view(msgs)
    assert tv.splitlines()[0] == "user: Weather in Lisbon and Porto?"
    assert 'assistant [call weather]: {"city": "Lisbon"}' in tv
    assert "tool: {\"temp\": 16}" in tv
    assert "c1" not in tv  # call ids are arbitrary, left out
    lv = langid_view(msgs.payload)
    assert "user:" not in lv and "temp" not in lv and "Porto 16" in lv

    ins = _record(InstructionPayload(instruction="Give an antonym.", input="ascending", output="descending"))
    assert text_view(ins) == "Give an antonym.\n\nascending\n\ndescending"
    assert text_view(_record(InstructionPayload(instruction="Say hi.", output="hi"))) == "Say hi.\n\nhi"
    rs = _record(ReasoningPayload(problem="P", process="Q", answer="R"))
    assert text_view(rs) == "P\n\nQ\n\nR"
    task = _record(TaskPayload(input="Compute gcd(462, 1071).", metadata={"type": "nt"}))
    assert text_view(task) == "Compute gcd(462, 1071)."
    assert text_view(_record(DocumentPayload(text="body", title="T"))) == "body"


# --- digests ----------------------------------------------------------------------------------


def test_record_digest_ignores_snapshot_lang_score_and_digests_but_not_content():
    p = DocumentPayload(text="Some text about dictionaries.", url="https://example.org/a")
    a = _record(p)
    b = _record(p, snapshot="src.20270101T000000", lang_score=0.51)
    b.raw_sha256 = "f" * 64
    assert record_digest(a) == record_digest(b) == a.record_sha256
    assert "snapshot" not in record_digest_input(a) and "lang_score" not in record_digest_input(a)
    assert record_digest(_record(p, lang="de")) != record_digest(a)
    assert record_digest(_record(DocumentPayload(text="Some text about dictionaries!"))) != record_digest(a)
    gov2 = Governance(license="CC0-1.0", rights_evidence="https://example.org/license")
    assert record_digest(_record(p, governance=gov2)) != record_digest(a)
    # the digest is canonical_digest over the documented content fields
    assert record_digest(a) == canonical_digest(record_digest_input(a))


def test_code_whitespace_survives_in_text_and_dedup_key():
    code_a = "def f(x):\n    if x:\n        return 1\n    return 2"
    code_b = "def f(x):\n    if x:\n        return 1\nreturn 2"  # different program
    ra = _record(DocumentPayload(text=code_a), domain="code")
    rb = _record(DocumentPayload(text=code_b), domain="code")
    assert text_view(ra) == code_a
    assert ra.dedup_key != rb.dedup_key
    # as prose the two would fold to the same key: that is why the domain matters
    assert dedup_key(code_a, "prose") == dedup_key(code_b, "prose")


# --- rows -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        DocumentPayload(text="Doc text.", title="T", url="https://x.test/", content_type="text/html"),
        MessagesPayload.model_validate({"messages": _tool_conversation()}),
        PreferencePayload.model_validate(
            {"prompt": [{"role": "user", "content": "Q?"}], "chosen": {"role": "assistant", "content": "A"}, "rejected": {"role": "assistant", "content": "B"}}
        ),
        InstructionPayload(instruction="Do.", input="", output="Done."),
        ReasoningPayload(problem="P", process="Q", answer="R", verdict="incorrect"),
        TaskPayload(input="Solve.", metadata={"type": "x", "n": [1, 2]}),
    ],
)
def test_rows_round_trip_and_fit_the_arrow_schema(payload):
    rec = _record(payload)
    row = record_to_row(rec)
    assert set(row) == set(RECORDS_SCHEMA.names)
    assert row["text"] == text_view(rec) and row["char_count"] == len(row["text"])
    assert json.loads(row["payload_json"])["kind"] == payload.kind
    back = row_to_record(row)
    assert back == rec
    assert record_to_row(back) == row
    table = pa.Table.from_pylist([row], schema=RECORDS_SCHEMA)
    assert table.to_pylist()[0] == row
    assert PAYLOAD_ADAPTER.validate_json(row["payload_json"]) == payload


def test_row_with_tampered_text_is_refused():
    row = record_to_row(_record(DocumentPayload(text="original")))
    row["text"] = "edited"
    with pytest.raises(ValueError, match="does not match"):
        row_to_record(row)


def test_message_defaults_are_explicit_in_payload_json():
    rec = _record(MessagesPayload(messages=[Message(role="user", content="hi")]))
    msg = json.loads(record_to_row(rec)["payload_json"])["messages"][0]
    assert msg == {"role": "user", "content": "hi", "tool_calls": [], "tool_call_id": None, "name": None}
