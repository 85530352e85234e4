"""Row adapters on realistic rows, and every declared failure condition."""

from __future__ import annotations

import json
from typing import get_args

import pytest

from corpus_assets.domain.canonical.adapters import ROW_ADAPTERS, AdapterError, adapt_row, problem_group_id
from corpus_assets.domain.core.reasons import Reason
from corpus_assets.domain.ingest.sources_config import RowAdapterName

SRC = "dump"
ITEM = "data/part-0.jsonl#L12"


def ok(adapter, row):
    return adapt_row(adapter, row, SRC, ITEM)


def fails(adapter, row, reason=Reason.SCHEMA_VIOLATION) -> str:
    with pytest.raises(AdapterError) as exc:
        adapt_row(adapter, row, SRC, ITEM)
    assert exc.value.reason is reason, exc.value.detail
    return exc.value.detail


def test_adapter_registry_matches_the_config_names():
    assert set(ROW_ADAPTERS) == set(get_args(RowAdapterName))
    for name, spec in ROW_ADAPTERS.items():
        assert spec.input_versions == ("1",) and spec.schema_version == "1"
        assert spec.convert.__doc__ and "Fail" in spec.convert.__doc__, f"{name} must document its failure conditions"


def test_unknown_adapter_and_unsupported_input_version():
    assert fails("csv_rows", {"text": "x"}, Reason.UNKNOWN_SCHEMA)
    with pytest.raises(AdapterError) as exc:
        adapt_row("text_document", {"text": "x"}, SRC, ITEM, version="2")
    assert exc.value.reason is Reason.UNKNOWN_SCHEMA


# --- local ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [("doc-7", "doc-7"), (42, "42"), (None, ITEM)])
def test_local_id_from_row_or_raw_item(value, expected):
    row = {"text": "Hello there, a document."}
    if value is not None:
        row["id"] = value
    assert ok("text_document", row).local_id == expected


@pytest.mark.parametrize("value", ["", " padded", "a\nb", "x" * 300, True, 1.5, ["a"], {"a": 1}])
def test_invalid_row_ids_are_violations_not_fallbacks(value):
    assert "id" in fails("text_document", {"id": value, "text": "Hello."})


# --- text_document --------------------------------------------------------------------------


def test_text_document():
    a = ok("text_document", {"id": 3, "text": "Caf\u0065\u0301 culture\r\nin Lisbon.  \n", "title": "  Cafe\n culture ", "url": "https://x.test/c"})
    assert a.payload.text == "Café culture\nin Lisbon."  # NFC, LF, trailing whitespace
    assert a.payload.title == "Cafe culture"
    assert a.group_id == "url:https://x.test/c"
    assert ok("text_document", {"text": "No url."}).group_id == f"doc:{SRC}:{ITEM}"
    assert fails("text_document", {"text": "  \n\t "}, Reason.EMPTY_DOCUMENT)
    assert fails("text_document", {"no_text": 1}, Reason.UNKNOWN_SCHEMA)
    assert fails("text_document", {"text": None}, Reason.UNKNOWN_SCHEMA)
    assert "must be a string" in fails("text_document", {"text": ["a"]})
    assert "'lang'" in fails("text_document", {"text": "x", "lang": "en"})
    assert "url" in fails("text_document", {"text": "x", "url": 5})


# --- openai_messages ------------------------------------------------------------------------

OPENAI_TOOLS = {
    "id": "conv-9",
    "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Lisbon?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Lisbon"}'}}],
        },
        {"role": "tool", "tool_call_id": "call_a", "name": "get_weather", "content": '{"temp_c": 19}'},
        {"role": "assistant", "content": "It is 19 °C in Lisbon."},
    ],
}


def test_openai_messages_nested_and_flat_tool_calls():
    a = ok("openai_messages", OPENAI_TOOLS)
    assert a.local_id == "conv-9" and a.group_id == f"conversation:{SRC}:conv-9"
    call = a.payload.messages[2].tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("call_a", "get_weather", '{"city":"Lisbon"}')
    assert a.payload.messages[3].name == "get_weather"
    flat = json.loads(json.dumps(OPENAI_TOOLS))
    flat["messages"][2]["tool_calls"] = [{"id": "call_a", "name": "get_weather", "arguments": {"city": "Lisbon"}}]
    b = ok("openai_messages", flat)
    assert b.payload.messages[2].tool_calls[0].arguments == '{"city":"Lisbon"}'  # object -> canonical JSON


def test_openai_single_text_part_is_accepted():
    a = ok("openai_messages", {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})
    assert a.payload.messages[0].content == "Hi"


def _broken(path, value):
    row = json.loads(json.dumps(OPENAI_TOOLS))
    target = row
    for p in path[:-1]:
        target = target[p]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return row


@pytest.mark.parametrize(
    "row, fragment",
    [
        (_broken(["messages", 3, "tool_call_id"], "call_zzz"), "answers no earlier"),
        (_broken(["messages", 3], {"role": "assistant", "content": "I will not wait."}), "without a result"),
        (_broken(["messages", 1, "role"], "developer"), "role"),
        (_broken(["messages", 1, "weight"], 1), "'weight'"),
        (_broken(["messages", 1, "content"], 7), "must be a string"),
        (_broken(["messages", 1, "content"], [{"type": "image_url", "image_url": {"url": "x"}}]), "single text part"),
        (_broken(["messages", 2, "tool_calls", 0, "type"], "retrieval"), "type 'function'"),
        (_broken(["messages", 2, "tool_calls", 0, "function", "arguments"], "{not json"), "JSON text"),
        (_broken(["messages", 2, "tool_calls", 0, "function", "name"], KeyError), "needs id, name and arguments"),
        (_broken(["messages"], []), "empty"),
        (_broken(["messages"], "user: hi"), "must be an array"),
        (_broken(["tools"], []), "'tools'"),
    ],
)
def test_openai_messages_violations(row, fragment):
    assert fragment in fails("openai_messages", row)


def test_openai_wrong_schema_is_unknown():
    assert fails("openai_messages", {"conversations": []}, Reason.UNKNOWN_SCHEMA)


# --- sharegpt -------------------------------------------------------------------------------


def test_sharegpt_plain_and_with_function_calls():
    a = ok(
        "sharegpt",
        {
            "id": "sg-002",
            "system": "Answer as a patient teacher.",
            "conversations": [
                {"from": "human", "value": "Why does 0.1 + 0.2 != 0.3?"},
                {"from": "gpt", "value": "Binary floating point."},
            ],
        },
    )
    assert [m.role for m in a.payload.messages] == ["system", "user", "assistant"]
    assert a.group_id == f"conversation:{SRC}:sg-002"
    b = ok(
        "sharegpt",
        {
            "conversations": [
                {"from": "human", "value": "Weather in Lisbon and Porto?"},
                {"from": "function_call", "value": json.dumps([{"name": "weather", "arguments": {"city": "Lisbon"}}, {"name": "weather", "arguments": {"city": "Porto"}}])},
                {"from": "observation", "value": '{"temp": 19}'},
                {"from": "observation", "value": '{"temp": 16}'},
                {"from": "gpt", "value": "19 and 16 °C."},
            ]
        },
    )
    msgs = b.payload.messages
    assert [c.id for c in msgs[1].tool_calls] == ["call_1_0", "call_1_1"]
    assert [m.tool_call_id for m in msgs[2:4]] == ["call_1_0", "call_1_1"]  # oldest pending call first
    assert b.local_id == ITEM


@pytest.mark.parametrize(
    "conversations, fragment",
    [
        ([{"from": "bing", "value": "x"}], "unsupported 'from'"),
        ([{"from": "human", "value": "x"}, {"from": "observation", "value": "1"}], "no pending"),
        ([{"from": "human", "value": "x"}, {"from": "function_call", "value": "weather(Lisbon)"}], "not JSON"),
        ([{"from": "human", "value": "x"}, {"from": "function_call", "value": '{"name": "f", "arguments": {}}'}], "without a result"),
        ([{"from": "human", "value": 3}], "must be a string"),
        ([{"from": "human", "value": "x", "weight": 0}], "'weight'"),
        ([{"from": "human"}], "needs 'from' and 'value'"),
        ([], "empty"),
    ],
)
def test_sharegpt_violations(conversations, fragment):
    assert fragment in fails("sharegpt", {"conversations": conversations})


# --- alpaca ---------------------------------------------------------------------------------


def test_alpaca_rows_and_problem_groups():
    a = ok("alpaca", {"instruction": "Rewrite this loop as a list comprehension.", "input": "result = []\nfor x in items:\n    if x > 0:\n        result.append(x * 2)", "output": "result = [x * 2 for x in items if x > 0]"})
    assert a.payload.input.endswith("        result.append(x * 2)")  # code indentation untouched
    b = ok("alpaca", {"instruction": "Give an antonym.", "output": "descending", "input": None})
    assert b.payload.input == ""
    # same prompt, different casing/whitespace and answer: same family
    c = ok("alpaca", {"instruction": "give  an ANTONYM.", "output": "fall"})
    assert b.group_id == c.group_id == problem_group_id("Give an antonym.")
    assert "'output'" in fails("alpaca", {"instruction": "Name three HTTP methods.", "input": ""})
    assert "must not be empty" in fails("alpaca", {"instruction": "Do it.", "output": "   "})
    assert fails("alpaca", {"prompt": "x", "completion": "y"}, Reason.UNKNOWN_SCHEMA)


# --- preference -----------------------------------------------------------------------------


def test_preference_forms_share_one_prompt():
    a = ok("preference", {"id": "pref-01", "prompt": "How should I store user passwords?", "chosen": "Use Argon2id.", "rejected": "Encrypt them with AES."})
    assert [m.role for m in a.payload.prompt] == ["user"]
    assert (a.payload.chosen.content, a.payload.rejected.content) == ("Use Argon2id.", "Encrypt them with AES.")
    # full conversations that repeat the prompt are cut back to one shared prompt
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What does HTTP 404 mean?"}]
    b = ok(
        "preference",
        {
            "prompt": prompt,
            "chosen": prompt + [{"role": "assistant", "content": "Not Found."}],
            "rejected": [{"role": "assistant", "content": "The server crashed."}],
        },
    )
    assert len(b.payload.prompt) == 2
    assert text_view_of(b).count("What does HTTP 404 mean?") == 1
    # the family ignores the system prompt: the same question with another system prompt groups together
    c = ok("preference", {"prompt": "What does HTTP 404 mean?", "chosen": "x", "rejected": "y"})
    assert b.group_id == c.group_id


def text_view_of(adapted):
    from corpus_assets.domain.canonical.records import payload_text_view

    return payload_text_view(adapted.payload)


@pytest.mark.parametrize(
    "row, fragment",
    [
        ({"prompt": "Q?", "chosen": "Same.", "rejected": "Same."}, "identical"),
        ({"prompt": "Q?", "chosen": [{"role": "user", "content": "Other Q?"}, {"role": "assistant", "content": "A"}], "rejected": "B"}, "shared prompt"),
        ({"prompt": "Q?", "chosen": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A"}, {"role": "user", "content": "more"}, {"role": "assistant", "content": "B"}], "rejected": "B"}, "exactly one assistant"),
        ({"prompt": "Q?", "chosen": {"role": "user", "content": "A"}, "rejected": "B"}, "plain assistant"),
        ({"prompt": 5, "chosen": "A", "rejected": "B"}, "prompt must be"),
        ({"prompt": "Q?", "chosen": "A"}, "'rejected'"),
        ({"prompt": "Q?", "chosen": "A", "rejected": "B", "score": 1}, "'score'"),
    ],
)
def test_preference_violations(row, fragment):
    assert fragment in fails("preference", row)


# --- reasoning ------------------------------------------------------------------------------


def test_reasoning_rows():
    a = ok("reasoning", {"id": "r-001", "problem": "A train travels 180 km in 2.5 hours. Average speed?", "solution": "180 / 2.5 = 72.", "answer": 72, "verdict": "correct"})
    assert (a.payload.process, a.payload.answer, a.payload.verdict) == ("180 / 2.5 = 72.", "72", "correct")
    assert a.group_id == problem_group_id("A train travels 180 km in 2.5 hours. Average speed?")
    b = ok("reasoning", {"problem": "p", "solution": "s", "answer": "a"})
    assert b.payload.verdict == "unverified"
    assert "verdict" in fails("reasoning", {"problem": "p", "solution": "s", "answer": "a", "verdict": True})
    assert "verdict" in fails("reasoning", {"problem": "p", "solution": "s", "answer": "a", "verdict": "maybe"})
    assert "must be a string" in fails("reasoning", {"problem": "p", "solution": "s", "answer": 7.5})
    assert "'solution'" in fails("reasoning", {"problem": "p", "answer": "a"})


# --- task -----------------------------------------------------------------------------------


def test_task_reference_is_returned_apart_and_absent_from_the_payload():
    ref = "gcd is twenty-one (21)"
    a = ok("task", {"task_id": "t-gcd-01", "input": "Compute gcd(462, 1071). Give the final answer in \\boxed{}.", "reference": ref, "metadata": {"type": "number_theory"}})
    assert a.local_id == "t-gcd-01" and a.has_reference and a.reference == ref
    assert ref not in a.payload.model_dump_json() and ref not in text_view_of(a)
    assert a.group_id == problem_group_id(a.payload.input)
    structured = ok("task", {"id": 5, "input": "Write add(a, b).", "reference": {"tests": ["assert add(1, 2) == 3"]}})
    assert structured.local_id == "5" and "assert add" not in structured.payload.model_dump_json()


@pytest.mark.parametrize(
    "row, fragment",
    [
        ({"input": "Q", "reference": "A", "metadata": {"answer": "A"}}, "'answer'"),
        ({"input": "Q", "reference": "A", "metadata": {"info": {"Solution": "x"}}}, "'Solution'"),
        ({"input": "Q", "reference": "forty-two", "metadata": {"hint": "forty-two"}}, "equals the reference"),
        ({"input": "Here is the answer: the integer 123456789 exactly.", "reference": "the integer 123456789 exactly"}, "contains the reference"),
        ({"input": "Q", "reference": "  "}, "reference is empty"),
        ({"input": "Q", "reference": "A", "metadata": [1]}, "metadata must be an object"),
        ({"task_id": "a", "id": "b", "input": "Q", "reference": "A"}, "differ"),
        ({"input": "Q"}, "'reference'"),
        ({"input": "   ", "reference": "A"}, "must not be empty"),
    ],
)
def test_task_violations(row, fragment):
    assert fragment in fails("task", row)


def test_short_references_are_not_searched_for_in_public_text():
    a = ok("task", {"input": "What is 7^222 mod 10? Options: 1, 3, 7, 9.", "reference": "9", "metadata": {"level": "9"}})
    assert a.reference == "9"


def test_details_never_echo_content():
    secret = "SECRET-CONTENT-1234567890"
    details = [
        fails("openai_messages", {"messages": [{"role": "user", "content": secret}, {"role": "tool", "tool_call_id": secret, "content": secret}]}),
        fails("sharegpt", {"conversations": [{"from": "human", "value": secret}, {"from": "function_call", "value": secret}]}),
        fails("preference", {"prompt": secret, "chosen": secret, "rejected": secret}),
        fails("task", {"input": secret, "reference": secret}),
        fails("reasoning", {"problem": secret, "solution": secret, "answer": secret, "verdict": secret}),
    ]
    for d in details:
        assert secret not in d and len(d) <= 300
