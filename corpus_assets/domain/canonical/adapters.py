"""Row adapters: one declared input format + version -> one canonical schema + version.

A row is one JSON object (a JSONL line, or a Parquet row as canonical JSON). Nothing is guessed:
a row that does not fit is refused with a reason code (``AdapterError``: UNKNOWN_SCHEMA or
SCHEMA_VIOLATION), to be quarantined. ``record_id = f"{source_id}:{local_id}"``; text fields go
through ``normalize.normalize_text``, ids and task data are kept as given; ``group_id`` follows one
rule per schema (document url, conversation, problem family).

Common rules and ``group_id`` per schema: docs/canonical.md#adapters
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from pydantic import ValidationError

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.hashing import canonical_json, dedup_normal_form, sha256_text
from corpus_assets.domain.canonical.normalize import normalize_text
from corpus_assets.domain.core.reasons import Reason
from corpus_assets.domain.canonical.records import (
    SCHEMA_VERSIONS,
    DocumentPayload,
    InstructionPayload,
    MessagesPayload,
    PreferencePayload,
    ReasoningPayload,
    TaskPayload,
)

__all__ = [
    "AdapterError",
    "Adapted",
    "RowAdapter",
    "ROW_ADAPTERS",
    "adapt_row",
    "problem_group_id",
    "validation_detail",
]

MAX_ID_CHARS = 256
MAX_DETAIL = 300
# metadata keys that would put the reference (or its tests) in public view
REFERENCE_LIKE_KEYS = frozenset(
    {
        "reference", "references", "answer", "answers", "final_answer", "solution", "solutions",
        "target", "targets", "label", "labels", "output", "outputs", "expected", "expected_output",
        "ground_truth", "gold", "canonical_solution", "tests", "test_cases", "hidden_tests",
    }
)
# a metadata string equal to a reference of >= 4 characters, or a reference of >= 16 characters
# found verbatim in the input or metadata, is a leak (shorter ones collide by chance: "9", "yes")
LEAK_EQUAL_MIN_CHARS = 4
LEAK_CHECK_MIN_CHARS = 16


class AdapterError(CorpusError, ValueError):
    """A row the adapter cannot map. ``detail`` is short and safe: field names and positions, never content."""

    def __init__(self, reason: Reason, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail[:MAX_DETAIL]


@dataclass(frozen=True)
class Adapted:
    payload: Any  # a validated payload model
    local_id: str
    group_id: str
    has_reference: bool = False
    reference: Any = None  # private task reference: never part of the payload


@dataclass(frozen=True)
class RowAdapter:
    name: str
    input_format: str
    input_versions: tuple[str, ...]
    schema_type: str
    required: frozenset
    optional: frozenset
    convert: Callable[[dict, str, str], Adapted]  # (row, source_id, item_id) -> Adapted

    @property
    def schema_version(self) -> str:
        return SCHEMA_VERSIONS[self.schema_type]

    def adapt(self, row: dict, source_id: str, item_id: str, version: str = "1") -> Adapted:
        if version not in self.input_versions:
            raise AdapterError(
                Reason.UNKNOWN_SCHEMA,
                f"adapter {self.name} reads input version(s) {', '.join(self.input_versions)}, not {version!r}",
            )
        present = {k for k, v in row.items() if v is not None}
        if not present & self.required:
            raise AdapterError(
                Reason.UNKNOWN_SCHEMA,
                f"row has none of the {self.name} fields ({', '.join(sorted(self.required))})",
            )
        unknown = set(row) - self.required - self.optional
        if unknown:
            raise AdapterError(Reason.SCHEMA_VIOLATION, f"unknown field(s): {_names(unknown)}")
        missing = self.required - present
        if missing:
            raise AdapterError(Reason.SCHEMA_VIOLATION, f"missing required field(s): {_names(missing)}")
        try:
            return self.convert(row, source_id, item_id)
        except ValidationError as exc:
            raise AdapterError(Reason.SCHEMA_VIOLATION, validation_detail(exc)) from None


# --- helpers ----------------------------------------------------------------------------------


def _names(keys) -> str:
    shown = [repr(k if len(k) <= 40 else k[:37] + "...") for k in sorted(keys)[:6]]
    return ", ".join(shown) + (" ..." if len(keys) > 6 else "")


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _violation(msg: str) -> AdapterError:
    return AdapterError(Reason.SCHEMA_VIOLATION, msg)


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _violation(f"{where} must be a string, got {_json_type(value)}")
    return value


def _text(value: Any, where: str) -> str:
    return normalize_text(_str(value, where))


def _opt_text(row: dict, key: str) -> Optional[str]:
    v = row.get(key)
    return None if v is None else _text(v, key)


def validation_detail(exc: ValidationError) -> str:
    """``loc: message`` of the first pydantic error, without the offending input."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    if not errors:
        return "invalid record"
    first = errors[0]
    loc = ""
    for part in first.get("loc", ()):
        loc += f"[{part}]" if isinstance(part, int) else (("." if loc else "") + str(part))
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return (f"{loc}: {msg}" if loc else msg) + more


_ID_BAD_RE = re.compile(r"[\x00-\x1f\x7f]")


def _local_id(row: dict, item_id: str, key: str = "id") -> str:
    v = row.get(key)
    if v is None:
        return item_id
    if isinstance(v, bool):
        raise _violation(f"field {key!r} must be a non-empty string or an integer, got boolean")
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        if not v or len(v) > MAX_ID_CHARS or v != v.strip() or _ID_BAD_RE.search(v):
            raise _violation(
                f"field {key!r} must be 1-{MAX_ID_CHARS} characters without control characters or surrounding whitespace"
            )
        return v
    raise _violation(f"field {key!r} must be a non-empty string or an integer, got {_json_type(v)}")


def problem_group_id(text: str) -> str:
    """``problem:<sha256>`` of the prose dedup normal form (case/whitespace folded) of ``text``."""
    return "problem:" + sha256_text(dedup_normal_form(text, "prose"))


def _record_id(source_id: str, local_id: str) -> str:
    return f"{source_id}:{local_id}"


# --- OpenAI-style messages --------------------------------------------------------------------

_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})


def _arguments(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value  # JSON text, validated by the model; kept verbatim
    if isinstance(value, (dict, list)):
        return canonical_json(value).decode("utf-8")
    raise _violation(f"{where} must be JSON text or a JSON object, got {_json_type(value)}")


def _tool_call(obj: Any, where: str) -> dict:
    if not isinstance(obj, dict):
        raise _violation(f"{where} must be an object, got {_json_type(obj)}")
    if "function" in obj:  # OpenAI: {"id", "type": "function", "function": {"name", "arguments"}}
        unknown = set(obj) - {"id", "type", "function"}
        if unknown:
            raise _violation(f"{where}: unknown field(s): {_names(unknown)}")
        if obj.get("type", "function") != "function":
            raise _violation(f"{where}: only tool calls of type 'function' are supported")
        fn = obj["function"]
        if not isinstance(fn, dict):
            raise _violation(f"{where}.function must be an object, got {_json_type(fn)}")
        unknown = set(fn) - {"name", "arguments"}
        if unknown:
            raise _violation(f"{where}.function: unknown field(s): {_names(unknown)}")
        name, args = fn.get("name"), fn.get("arguments")
    else:  # flat: {"id", "name", "arguments"}
        unknown = set(obj) - {"id", "type", "name", "arguments"}
        if unknown:
            raise _violation(f"{where}: unknown field(s): {_names(unknown)}")
        if obj.get("type", "function") != "function":
            raise _violation(f"{where}: only tool calls of type 'function' are supported")
        name, args = obj.get("name"), obj.get("arguments")
    if obj.get("id") is None or name is None or args is None:
        raise _violation(f"{where}: a tool call needs id, name and arguments")
    return {"id": _str(obj["id"], f"{where}.id"), "name": _str(name, f"{where}.name"), "arguments": _arguments(args, f"{where}.arguments")}


def _content(value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return normalize_text(value)
    if isinstance(value, list):
        # content parts: exactly one text part is unambiguous; anything else is not guessed
        if len(value) == 1 and isinstance(value[0], dict) and set(value[0]) == {"type", "text"} and value[0]["type"] == "text":
            return normalize_text(_str(value[0]["text"], f"{where}[0].text"))
        raise _violation(f"{where}: only a string or a single text part is supported")
    raise _violation(f"{where} must be a string, got {_json_type(value)}")


def _openai_message(obj: Any, where: str) -> dict:
    if not isinstance(obj, dict):
        raise _violation(f"{where} must be an object, got {_json_type(obj)}")
    unknown = set(obj) - _MESSAGE_KEYS
    if unknown:
        raise _violation(f"{where}: unknown field(s): {_names(unknown)}")
    msg: dict = {"role": obj.get("role"), "content": _content(obj.get("content"), f"{where}.content")}
    calls = obj.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise _violation(f"{where}.tool_calls must be an array, got {_json_type(calls)}")
        msg["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
    if obj.get("tool_call_id") is not None:
        msg["tool_call_id"] = obj["tool_call_id"]
    if obj.get("name") is not None:
        msg["name"] = obj["name"]
    return msg


def _openai_messages(value: Any, where: str) -> list[dict]:
    if not isinstance(value, list):
        raise _violation(f"{where} must be an array, got {_json_type(value)}")
    if not value:
        raise _violation(f"{where} is empty")
    return [_openai_message(m, f"{where}[{i}]") for i, m in enumerate(value)]


# --- adapters ---------------------------------------------------------------------------------


def _text_document(row: dict, source_id: str, item_id: str) -> Adapted:
    """text_document v1: ``{"text": str, "id"?: str|int, "title"?: str, "url"?: str}`` -> document v1.

    Fails: no ``text`` (UNKNOWN_SCHEMA); non-string text/title/url, unknown fields
    (SCHEMA_VIOLATION); text empty after normalization (EMPTY_DOCUMENT, rejected).
    """
    local_id = _local_id(row, item_id)
    text = _text(row["text"], "text")
    if not text:
        raise AdapterError(Reason.EMPTY_DOCUMENT, "text is empty after normalization")
    title = _opt_text(row, "title")
    title = " ".join(title.split()) if title else None
    url = row.get("url")
    if url is not None:
        url = _str(url, "url")
    payload = DocumentPayload(text=text, title=title or None, url=url or None, content_type="text/plain")
    record_id = _record_id(source_id, local_id)
    return Adapted(payload, local_id, f"url:{url}" if url else f"doc:{record_id}")


def _openai_chat(row: dict, source_id: str, item_id: str) -> Adapted:
    """openai_messages v1: ``{"messages": [...], "id"?}`` -> messages v1.

    Each message: ``role`` (system|user|assistant|tool), ``content`` (string; null or absent only
    on assistant messages with tool calls and on tool messages; a list holding exactly one
    ``{"type": "text", "text"}`` part is accepted), ``tool_calls`` on assistant messages
    (OpenAI ``{"id", "type": "function", "function": {"name", "arguments"}}`` or flat
    ``{"id", "name", "arguments"}``; arguments as JSON text, or an object that is serialized as
    canonical JSON), ``tool_call_id`` on tool messages, optional ``name``.
    Fails (SCHEMA_VIOLATION): other roles (``function``, ``developer`` ...), unknown fields,
    wrong types, empty message list, a message without content, tool calls on a non-assistant
    message, a tool result that answers no earlier call or an answered one, duplicate call ids,
    a call without exactly one result, arguments that are not JSON.
    """
    local_id = _local_id(row, item_id)
    messages = _openai_messages(row["messages"], "messages")
    payload = MessagesPayload.model_validate({"messages": messages})
    return Adapted(payload, local_id, f"conversation:{_record_id(source_id, local_id)}")


_SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system"}
_SHAREGPT_RESULTS = {"observation", "tool"}


def _sharegpt_calls(value: str, where: str, turn: int) -> list[dict]:
    try:
        spec = json.loads(value)
    except (ValueError, RecursionError):
        raise _violation(f"{where}: function_call value is not JSON") from None
    specs = spec if isinstance(spec, list) else [spec]
    if not specs:
        raise _violation(f"{where}: function_call holds no call")
    calls = []
    for k, s in enumerate(specs):
        if not isinstance(s, dict):
            raise _violation(f"{where}: a function call must be an object with name and arguments")
        unknown = set(s) - {"name", "arguments"}
        if unknown:
            raise _violation(f"{where}: unknown function call field(s): {_names(unknown)}")
        if s.get("name") is None or s.get("arguments") is None:
            raise _violation(f"{where}: a function call needs name and arguments")
        call_id = f"call_{turn}" if len(specs) == 1 else f"call_{turn}_{k}"
        calls.append({"id": call_id, "name": _str(s["name"], f"{where}.name"), "arguments": _arguments(s["arguments"], f"{where}.arguments")})
    return calls


def _sharegpt(row: dict, source_id: str, item_id: str) -> Adapted:
    """sharegpt v1: ``{"conversations": [{"from", "value"}], "system"?: str, "id"?}`` -> messages v1.

    ``from``: human -> user, gpt -> assistant, system -> system, function_call -> an assistant
    message whose tool calls are the JSON ``{"name", "arguments"}`` object (or array of them) in
    ``value``, observation / tool -> a tool message answering the oldest unanswered call. ShareGPT
    has no call ids, so they are assigned deterministically: ``call_<turn>`` (``call_<turn>_<k>``
    for several calls in one turn). A top-level ``system`` string becomes a leading system message.
    Fails (SCHEMA_VIOLATION): other ``from`` values, non-string values, unknown fields, an empty
    conversation, a function_call value that is not such JSON, an observation with no pending call,
    a call never answered.
    """
    local_id = _local_id(row, item_id)
    conv = row["conversations"]
    if not isinstance(conv, list):
        raise _violation(f"conversations must be an array, got {_json_type(conv)}")
    if not conv:
        raise _violation("conversations is empty")
    messages: list[dict] = []
    if row.get("system") is not None:
        messages.append({"role": "system", "content": _text(row["system"], "system")})
    pending: list[str] = []
    for i, turn in enumerate(conv):
        where = f"conversations[{i}]"
        if not isinstance(turn, dict):
            raise _violation(f"{where} must be an object, got {_json_type(turn)}")
        unknown = set(turn) - {"from", "value"}
        if unknown:
            raise _violation(f"{where}: unknown field(s): {_names(unknown)}")
        src, value = turn.get("from"), turn.get("value")
        if src is None or value is None:
            raise _violation(f"{where}: needs 'from' and 'value'")
        _str(src, f"{where}.from")
        value = _str(value, f"{where}.value")
        if src in _SHAREGPT_ROLES:
            messages.append({"role": _SHAREGPT_ROLES[src], "content": normalize_text(value)})
        elif src == "function_call":
            calls = _sharegpt_calls(value, where, i)
            pending.extend(c["id"] for c in calls)
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        elif src in _SHAREGPT_RESULTS:
            if not pending:
                raise _violation(f"{where}: {src} answers no pending function call")
            messages.append({"role": "tool", "tool_call_id": pending.pop(0), "content": normalize_text(value)})
        else:
            shown = src if len(src) <= 20 else src[:17] + "..."
            raise _violation(f"{where}: unsupported 'from' value {shown!r}")
    payload = MessagesPayload.model_validate({"messages": messages})
    return Adapted(payload, local_id, f"conversation:{_record_id(source_id, local_id)}")


def _alpaca(row: dict, source_id: str, item_id: str) -> Adapted:
    """alpaca v1: ``{"instruction": str, "input"?: str, "output": str, "id"?}`` -> instruction v1.

    Fails: neither instruction nor output (UNKNOWN_SCHEMA); one of them missing, non-string
    fields, blank instruction or output, unknown fields (SCHEMA_VIOLATION).
    """
    local_id = _local_id(row, item_id)
    instruction = _text(row["instruction"], "instruction")
    inp = _opt_text(row, "input") or ""
    output = _text(row["output"], "output")
    payload = InstructionPayload.model_validate({"instruction": instruction, "input": inp, "output": output})
    family = instruction + ("\n" + inp if inp else "")
    return Adapted(payload, local_id, problem_group_id(family))


def _preference_answer(value: Any, prompt: list[dict], side: str) -> dict:
    if isinstance(value, str):
        return {"role": "assistant", "content": normalize_text(value)}
    if isinstance(value, dict):
        return _openai_message(value, side)
    if isinstance(value, list):
        msgs = _openai_messages(value, side)
        if len(msgs) > 1:
            # a whole conversation: it must continue exactly the shared prompt
            if msgs[: len(prompt)] != prompt:
                raise _violation(f"{side} is a conversation that does not start with the shared prompt")
            msgs = msgs[len(prompt):]
        if len(msgs) != 1:
            raise _violation(f"{side} must be exactly one assistant answer to the prompt")
        return msgs[0]
    raise _violation(f"{side} must be a string, a message or a message array, got {_json_type(value)}")


def _preference(row: dict, source_id: str, item_id: str) -> Adapted:
    """preference v1: ``{"prompt": str | messages, "chosen": answer, "rejected": answer, "id"?}`` -> preference v1.

    ``prompt``: a string (one user message) or an OpenAI-style message array. An answer: a string
    (one assistant message), one message object, or a message array that is either one assistant
    message or the whole conversation (the shared prompt followed by one assistant message).
    Fails (SCHEMA_VIOLATION): a field missing or of another type, answers that are not a single
    plain assistant message, conversations that do not start with the shared prompt (two prompts
    would not be comparable), identical chosen and rejected answers, a prompt not ending with a
    user/tool turn.
    """
    local_id = _local_id(row, item_id)
    prompt_value = row["prompt"]
    if isinstance(prompt_value, str):
        prompt = [{"role": "user", "content": normalize_text(prompt_value)}]
    elif isinstance(prompt_value, list):
        prompt = _openai_messages(prompt_value, "prompt")
    else:
        raise _violation(f"prompt must be a string or a message array, got {_json_type(prompt_value)}")
    chosen = _preference_answer(row["chosen"], prompt, "chosen")
    rejected = _preference_answer(row["rejected"], prompt, "rejected")
    payload = PreferencePayload.model_validate({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    family = "\n".join(m.content for m in payload.prompt if m.role == "user")
    return Adapted(payload, local_id, problem_group_id(family))


def _reasoning(row: dict, source_id: str, item_id: str) -> Adapted:
    """reasoning v1: ``{"problem": str, "solution": str, "answer": str|int, "verdict"?: str, "id"?}`` -> reasoning v1.

    ``solution`` is the process; ``verdict`` is the verifier's conclusion, one of correct /
    incorrect / unverified (absent or null: unverified) and never inferred from the text.
    Fails (SCHEMA_VIOLATION): missing fields, non-string fields (answer may be an integer),
    blank fields, another verdict value, unknown fields.
    """
    local_id = _local_id(row, item_id)
    problem = _text(row["problem"], "problem")
    process = _text(row["solution"], "solution")
    answer = row["answer"]
    if isinstance(answer, int) and not isinstance(answer, bool):
        answer = str(answer)
    answer = _text(answer, "answer")
    verdict = row.get("verdict")
    if verdict is None:
        verdict = "unverified"
    elif not isinstance(verdict, str) or verdict not in ("correct", "incorrect", "unverified"):
        raise _violation("verdict must be one of 'correct', 'incorrect', 'unverified'")
    payload = ReasoningPayload.model_validate({"problem": problem, "process": process, "answer": answer, "verdict": verdict})
    return Adapted(payload, local_id, problem_group_id(problem))


def _walk_keys_and_leaves(obj: Any, keys: list, leaves: list) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            keys.append(k)
            _walk_keys_and_leaves(v, keys, leaves)
    elif isinstance(obj, list):
        for v in obj:
            _walk_keys_and_leaves(v, keys, leaves)
    else:
        leaves.append(obj)


def _task(row: dict, source_id: str, item_id: str) -> Adapted:
    """task v1: ``{"input": str, "reference": any JSON, "task_id"? | "id"?, "metadata"?: object}`` -> task v1.

    The record holds the public input and metadata only; the reference is returned separately
    (``Adapted.reference``) for the owner-only references table. Fails (SCHEMA_VIOLATION):
    missing input/reference, blank input, an empty string reference, ``task_id`` and ``id`` both
    given and different, metadata that is not an object, metadata keys that would publish the
    reference (answer, solution, tests ... see ``REFERENCE_LIKE_KEYS``), a metadata value equal to
    the reference, or a reference of at least 16 characters found verbatim in the input or
    metadata.
    """
    tid, rid = row.get("task_id"), row.get("id")
    if tid is not None and rid is not None and tid != rid:
        raise _violation("task_id and id are both given and differ")
    local_id = _local_id(row, item_id, "task_id" if tid is not None else "id")
    text = _text(row["input"], "input")
    reference = row["reference"]
    if isinstance(reference, str) and not reference.strip():
        raise _violation("reference is empty")
    metadata = row.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise _violation(f"metadata must be an object, got {_json_type(metadata)}")
    keys: list = []
    leaves: list = []
    _walk_keys_and_leaves(metadata, keys, leaves)
    leaky = sorted({k for k in keys if k.lower() in REFERENCE_LIKE_KEYS})
    if leaky:
        raise _violation(f"metadata field(s) {_names(leaky)} may publish the reference")
    ref_text = reference if isinstance(reference, str) else canonical_json(reference).decode("utf-8")
    if len(ref_text.strip()) >= LEAK_EQUAL_MIN_CHARS and any(
        isinstance(leaf, str) and leaf.strip() == ref_text.strip() for leaf in leaves
    ):
        raise _violation("a metadata value equals the reference")
    if len(ref_text.strip()) >= LEAK_CHECK_MIN_CHARS:
        needles = {ref_text.strip(), normalize_text(ref_text).strip()}
        haystacks = [text, *keys, *(leaf for leaf in leaves if isinstance(leaf, str))]
        if any(n in h for n in needles for h in haystacks):
            raise _violation("the public input or metadata contains the reference")
    payload = TaskPayload.model_validate({"input": text, "metadata": metadata})
    return Adapted(payload, local_id, problem_group_id(text), has_reference=True, reference=reference)


ROW_ADAPTERS: dict[str, RowAdapter] = {
    a.name: a
    for a in (
        RowAdapter("text_document", "JSON object with a text field", ("1",), "document",
                   frozenset({"text"}), frozenset({"id", "title", "url"}), _text_document),
        RowAdapter("openai_messages", "OpenAI chat messages", ("1",), "messages",
                   frozenset({"messages"}), frozenset({"id"}), _openai_chat),
        RowAdapter("sharegpt", "ShareGPT conversations", ("1",), "messages",
                   frozenset({"conversations"}), frozenset({"id", "system"}), _sharegpt),
        RowAdapter("alpaca", "Alpaca instruction/input/output", ("1",), "instruction",
                   frozenset({"instruction", "output"}), frozenset({"input", "id"}), _alpaca),
        RowAdapter("preference", "prompt/chosen/rejected pairs", ("1",), "preference",
                   frozenset({"prompt", "chosen", "rejected"}), frozenset({"id"}), _preference),
        RowAdapter("reasoning", "problem/solution/answer traces", ("1",), "reasoning",
                   frozenset({"problem", "solution", "answer"}), frozenset({"verdict", "id"}), _reasoning),
        RowAdapter("task", "task input with a private reference", ("1",), "task",
                   frozenset({"input", "reference"}), frozenset({"task_id", "id", "metadata"}), _task),
    )
}


def adapt_row(adapter: str, row: dict, source_id: str, item_id: str, version: str = "1") -> Adapted:
    """Map one row with the named adapter; raises ``AdapterError`` (reason + safe detail)."""
    spec = ROW_ADAPTERS.get(adapter)
    if spec is None:
        raise AdapterError(Reason.UNKNOWN_SCHEMA, f"no row adapter named {adapter!r}")
    if not isinstance(row, dict):
        raise AdapterError(Reason.NOT_AN_OBJECT, f"row is a JSON {_json_type(row)}, not an object")
    return spec.adapt(row, source_id, item_id, version)
