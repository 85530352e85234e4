"""Canonical typed records: a common envelope plus a typed payload chosen by ``kind``.

``Record`` carries ``record_id`` (``<source_id>:<local_id>``), the raw item it came from, schema,
adapter, domain, language, ``group_id`` (the family that must not straddle train / evaluation),
lineage ``parents``, governance and digests. A task's reference answer is never a field of a
record. The record digest excludes ``snapshot``, ``item_id``-as-position and ``lang_score``, so the
same content captured in two snapshots has the same digest.

Envelope, payloads and the digest: docs/canonical.md#records
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Optional, Union

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from corpus_assets.domain.core.hashing import canonical_digest, canonical_json
from corpus_assets.domain.ingest.sources_config import Governance

__all__ = [
    "SCHEMA_VERSIONS",
    "Role",
    "ToolCall",
    "Message",
    "DocumentPayload",
    "MessagesPayload",
    "PreferencePayload",
    "InstructionPayload",
    "ReasoningPayload",
    "TaskPayload",
    "Payload",
    "PAYLOAD_ADAPTER",
    "Record",
    "raw_parent_id",
    "check_tool_pairing",
    "text_view",
    "payload_text_view",
    "langid_view",
    "record_digest",
    "record_digest_input",
    "RECORDS_SCHEMA",
    "record_to_row",
    "row_to_record",
]

# canonical schema versions, per payload kind
SCHEMA_VERSIONS: dict[str, str] = {
    "document": "1",
    "messages": "1",
    "preference": "1",
    "instruction": "1",
    "reasoning": "1",
    "task": "1",
}

Role = Literal["system", "user", "assistant", "tool"]
Verdict = Literal["correct", "incorrect", "unverified"]
Domain = Literal["prose", "code"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or blank")
    return value


# --- messages ---------------------------------------------------------------------------------


class ToolCall(_Model):
    """One function call an assistant message makes; ``arguments`` is JSON text."""

    id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=256)
    arguments: str

    @field_validator("arguments")
    @classmethod
    def _json_arguments(cls, v: str) -> str:
        try:
            json.loads(v)
        except (ValueError, RecursionError):
            raise ValueError("tool call arguments must be JSON text") from None
        return v


class Message(_Model):
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: Optional[str] = Field(default=None, min_length=1, max_length=256)
    name: Optional[str] = Field(default=None, min_length=1, max_length=256)  # participant / tool name

    @model_validator(mode="after")
    def _role_rules(self) -> "Message":
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages may make tool calls, not {self.role}")
        if self.role == "tool":
            if self.tool_call_id is None:
                raise ValueError("a tool message needs the tool_call_id it answers")
        elif self.tool_call_id is not None:
            raise ValueError(f"tool_call_id is only allowed on tool messages, not {self.role}")
        if self.role != "tool" and not self.tool_calls and not self.content.strip():
            raise ValueError(f"{self.role} message has no content")
        return self


def check_tool_pairing(messages: list[Message]) -> None:
    """Every tool call id is unique and gets exactly one result; every tool message answers exactly one
    earlier, still unanswered call. Raises ``ValueError`` (messages name positions, never content)."""
    answered: dict[str, bool] = {}
    for i, m in enumerate(messages):
        for call in m.tool_calls:
            if call.id in answered:
                raise ValueError(f"message {i}: tool call id is not unique in the conversation")
            answered[call.id] = False
        if m.role == "tool":
            state = answered.get(m.tool_call_id)  # type: ignore[arg-type]
            if state is None:
                raise ValueError(f"message {i}: tool result answers no earlier assistant tool call")
            if state:
                raise ValueError(f"message {i}: tool call already has a result")
            answered[m.tool_call_id] = True  # type: ignore[index]
    missing = sum(1 for done in answered.values() if not done)
    if missing:
        raise ValueError(f"{missing} tool call(s) without a result")


# --- payloads ---------------------------------------------------------------------------------


class DocumentPayload(_Model):
    kind: Literal["document"] = "document"
    text: str = Field(min_length=1)
    title: Optional[str] = None
    url: Optional[str] = None
    content_type: str = ""


class MessagesPayload(_Model):
    kind: Literal["messages"] = "messages"
    messages: list[Message] = Field(min_length=1)

    @model_validator(mode="after")
    def _pairing(self) -> "MessagesPayload":
        check_tool_pairing(self.messages)
        return self


class PreferencePayload(_Model):
    """One shared prompt (a message list) and two assistant answers to exactly that prompt."""

    kind: Literal["preference"] = "preference"
    prompt: list[Message] = Field(min_length=1)
    chosen: Message
    rejected: Message

    @model_validator(mode="after")
    def _comparable(self) -> "PreferencePayload":
        check_tool_pairing(self.prompt)
        if self.prompt[-1].role not in ("user", "tool"):
            raise ValueError("the prompt must end with a user or tool message")
        for side in ("chosen", "rejected"):
            m: Message = getattr(self, side)
            if m.role != "assistant" or m.tool_calls:
                raise ValueError(f"{side} must be a plain assistant message")
        if self.chosen.content == self.rejected.content:
            raise ValueError("chosen and rejected are identical")
        return self


class InstructionPayload(_Model):
    kind: Literal["instruction"] = "instruction"
    instruction: str
    input: str = ""
    output: str

    _blank_instruction = field_validator("instruction", "output")(_non_blank)


class ReasoningPayload(_Model):
    kind: Literal["reasoning"] = "reasoning"
    problem: str
    process: str
    answer: str
    verdict: Verdict = "unverified"

    _blank = field_validator("problem", "process", "answer")(_non_blank)


class TaskPayload(_Model):
    """Public side of a task: the input and public metadata. The reference answer is not a field."""

    kind: Literal["task"] = "task"
    input: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    _blank = field_validator("input")(_non_blank)

    @field_validator("metadata")
    @classmethod
    def _json_metadata(cls, v: dict) -> dict:
        try:
            canonical_json(v)
        except (TypeError, ValueError):
            raise ValueError("metadata must be plain JSON (no NaN/Infinity)") from None
        return v


Payload = Annotated[
    Union[DocumentPayload, MessagesPayload, PreferencePayload, InstructionPayload, ReasoningPayload, TaskPayload],
    Field(discriminator="kind"),
]
PAYLOAD_ADAPTER: TypeAdapter = TypeAdapter(Payload)


# --- envelope ---------------------------------------------------------------------------------


def raw_parent_id(source_id: str, item_id: str) -> str:
    """Lineage id of a raw item within its source (the snapshot is in the envelope, not here)."""
    return f"raw:{source_id}:{item_id}"


class Record(_Model):
    record_id: str = Field(min_length=3)
    source_id: str = Field(min_length=1)
    snapshot: str = Field(min_length=1)
    item_id: str
    schema_type: str
    schema_version: str
    adapter: str = Field(min_length=1)
    adapter_version: str = Field(min_length=1)
    domain: Domain
    lang: str = "und"
    lang_score: float = Field(default=0.0, ge=0.0, le=1.0)
    group_id: str = Field(min_length=1)
    parents: list[str] = Field(default_factory=list)
    governance: Governance
    raw_sha256: str = ""
    text_sha256: str = ""
    record_sha256: str = ""
    dedup_key: str = ""
    payload: Payload

    @model_validator(mode="after")
    def _consistent(self) -> "Record":
        if self.schema_type != self.payload.kind:
            raise ValueError(f"schema_type {self.schema_type!r} does not match payload kind {self.payload.kind!r}")
        if not self.record_id.startswith(self.source_id + ":") or len(self.record_id) == len(self.source_id) + 1:
            raise ValueError("record_id must be '<source_id>:<local_id>'")
        return self


# --- text views -------------------------------------------------------------------------------


def _message_lines(messages: list[Message], out: list[str]) -> None:
    for m in messages:
        if m.content or not m.tool_calls:
            out.append(f"{m.role}: {m.content}")
        for call in m.tool_calls:
            out.append(f"{m.role} [call {call.name}]: {call.arguments}")


def payload_text_view(payload) -> str:
    """Deterministic text rendering of a payload (see ``text_view``)."""
    kind = payload.kind
    if kind == "document":
        return payload.text
    if kind == "messages":
        lines: list[str] = []
        _message_lines(payload.messages, lines)
        return "\n".join(lines)
    if kind == "preference":
        lines = []
        _message_lines(payload.prompt, lines)
        lines.append("[chosen]")
        lines.append(f"assistant: {payload.chosen.content}")
        lines.append("[rejected]")
        lines.append(f"assistant: {payload.rejected.content}")
        return "\n".join(lines)
    if kind == "instruction":
        parts = [payload.instruction, payload.input, payload.output] if payload.input else [payload.instruction, payload.output]
        return "\n\n".join(parts)
    if kind == "reasoning":
        return "\n\n".join((payload.problem, payload.process, payload.answer))
    if kind == "task":
        return payload.input
    raise TypeError(f"unknown payload kind {kind!r}")


def text_view(record: Record) -> str:
    """The text of a record, used for ``text_sha256``, the dedup key and the ``text`` column.

    document: the text. messages: one ``role: content`` line per message and one
    ``assistant [call name]: arguments`` line per tool call (call ids are left out: they are
    arbitrary). preference: the prompt lines, then ``[chosen]`` / ``[rejected]`` markers each
    followed by ``assistant: answer``. instruction: instruction, input (if any) and output
    separated by blank lines. reasoning: problem, process and answer separated by blank lines (the
    verdict is metadata). task: the public input only.
    """
    return payload_text_view(record.payload)


def langid_view(payload) -> str:
    """What language ID reads: the natural-language content without role labels, markers or tool
    call arguments (those would pull short conversations towards English)."""
    kind = payload.kind
    if kind == "messages":
        return "\n".join(m.content for m in payload.messages if m.role != "tool" and m.content)
    if kind == "preference":
        parts = [m.content for m in payload.prompt if m.role != "tool" and m.content]
        parts += [payload.chosen.content, payload.rejected.content]
        return "\n".join(parts)
    return payload_text_view(payload)


# --- digests ----------------------------------------------------------------------------------


def record_digest_input(record: Record) -> dict:
    """The content fields the record digest covers (see docs/canonical.md#records)."""
    return {
        "record_id": record.record_id,
        "source_id": record.source_id,
        "schema": {"type": record.schema_type, "version": record.schema_version},
        "adapter": {"name": record.adapter, "version": record.adapter_version},
        "group_id": record.group_id,
        "parents": list(record.parents),
        "governance": record.governance.model_dump(mode="json"),
        "domain": record.domain,
        "lang": record.lang,
        "payload": record.payload.model_dump(mode="json"),
    }


def record_digest(record: Record) -> str:
    return canonical_digest(record_digest_input(record))


# --- rows -------------------------------------------------------------------------------------

RECORDS_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("source_id", pa.string()),
        ("snapshot", pa.string()),
        ("item_id", pa.string()),
        ("schema_type", pa.string()),
        ("schema_version", pa.string()),
        ("adapter", pa.string()),
        ("adapter_version", pa.string()),
        ("domain", pa.string()),
        ("lang", pa.string()),
        ("lang_score", pa.float64()),
        ("group_id", pa.string()),
        ("parents_json", pa.string()),
        ("governance_json", pa.string()),
        ("raw_sha256", pa.string()),
        ("text_sha256", pa.string()),
        ("record_sha256", pa.string()),
        ("dedup_key", pa.string()),
        ("char_count", pa.int64()),
        ("text", pa.large_string()),
        ("payload_json", pa.large_string()),
    ]
)


def _cjson(obj: Any) -> str:
    return canonical_json(obj).decode("utf-8")


def record_to_row(record: Record) -> dict:
    """Flat row for ``RECORDS_SCHEMA``; ``text`` is ``text_view`` and ``payload_json`` the canonical JSON
    of the payload."""
    text = payload_text_view(record.payload)
    return {
        "record_id": record.record_id,
        "source_id": record.source_id,
        "snapshot": record.snapshot,
        "item_id": record.item_id,
        "schema_type": record.schema_type,
        "schema_version": record.schema_version,
        "adapter": record.adapter,
        "adapter_version": record.adapter_version,
        "domain": record.domain,
        "lang": record.lang,
        "lang_score": float(record.lang_score),
        "group_id": record.group_id,
        "parents_json": _cjson(list(record.parents)),
        "governance_json": _cjson(record.governance.model_dump(mode="json")),
        "raw_sha256": record.raw_sha256,
        "text_sha256": record.text_sha256,
        "record_sha256": record.record_sha256,
        "dedup_key": record.dedup_key,
        "char_count": len(text),
        "text": text,
        "payload_json": _cjson(record.payload.model_dump(mode="json")),
    }


def row_to_record(row: dict) -> Record:
    """Inverse of ``record_to_row`` (fully validated). ``text`` and ``char_count`` are derived columns;
    a row whose ``text`` disagrees with its payload is refused."""
    record = Record.model_validate(
        {
            "record_id": row["record_id"],
            "source_id": row["source_id"],
            "snapshot": row["snapshot"],
            "item_id": row["item_id"],
            "schema_type": row["schema_type"],
            "schema_version": row["schema_version"],
            "adapter": row["adapter"],
            "adapter_version": row["adapter_version"],
            "domain": row["domain"],
            "lang": row["lang"],
            "lang_score": row["lang_score"],
            "group_id": row["group_id"],
            "parents": json.loads(row["parents_json"]),
            "governance": json.loads(row["governance_json"]),
            "raw_sha256": row["raw_sha256"],
            "text_sha256": row["text_sha256"],
            "record_sha256": row["record_sha256"],
            "dedup_key": row["dedup_key"],
            "payload": json.loads(row["payload_json"]),
        }
    )
    if "text" in row and row["text"] is not None and row["text"] != payload_text_view(record.payload):
        raise ValueError(f"row {row['record_id']!r}: text column does not match its payload")
    return record
