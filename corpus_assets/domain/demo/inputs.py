"""Small conversation / instruction / preference / reasoning / task dumps the demo writes itself.

They are deliberately a little dirty — a malformed line, a blank line, an unpaired tool call, a
row missing a field, invalid UTF-8 — so the demo shows every input being accounted for.
Written deterministically: the same files every run. They hold personal data on purpose (what
curation redacts or quarantines), so the tree is owner-only: 0700 directories, 0600 files, also
when an earlier run left it with wider modes.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from corpus_assets.domain.core.atomic_files import atomic_write_bytes

_DIR_MODE = 0o700
_FILE_MODE = 0o600

_CHAT = [
    {"id": "chat-0001", "messages": [
        {"role": "system", "content": "You are a concise assistant for Python developers."},
        {"role": "user", "content": "How do I read a file line by line without loading it all into memory?"},
        {"role": "assistant", "content": "Iterate over the file object:\n\n```python\nwith open(path, encoding=\"utf-8\") as f:\n    for line in f:\n        handle(line)\n```\n\nThe file object yields one line at a time, so memory stays bounded."},
    ]},
    {"id": "chat-0002", "messages": [
        {"role": "user", "content": "What is the difference between a list and a tuple?"},
        {"role": "assistant", "content": "A list is mutable and a tuple is immutable. Tuples can be dictionary keys when their items are hashable; lists cannot."},
        {"role": "user", "content": "And performance?"},
        {"role": "assistant", "content": "Tuples are slightly smaller and faster to create, but choose by meaning: fixed records are tuples, growing collections are lists."},
    ]},
    {"id": "chat-0003", "messages": [
        {"role": "user", "content": "What's the weather in Lisbon right now?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Lisbon\"}"}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 19, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 19 °C with a clear sky in Lisbon."},
    ]},
    {"id": "chat-0004", "messages": [
        {"role": "user", "content": "Translate 'good morning' into German."},
        {"role": "assistant", "content": "Guten Morgen."},
    ]},
    # a tool result that answers no call: a schema violation, quarantined
    {"id": "chat-0005", "messages": [
        {"role": "user", "content": "Convert 10 miles to kilometres."},
        {"role": "tool", "tool_call_id": "call_missing", "content": "16.09"},
        {"role": "assistant", "content": "10 miles is about 16.09 km."},
    ]},
]

_SHAREGPT = [
    {"id": "sg-001", "conversations": [
        {"from": "human", "value": "Explain what a Python generator is in two sentences."},
        {"from": "gpt", "value": "A generator is a function that uses yield to produce a sequence of values lazily, one at a time. It keeps its local state between calls, so it can stream large or infinite sequences without building them in memory."},
    ]},
    {"id": "sg-002", "conversations": [
        {"from": "system", "value": "Answer as a patient teacher."},
        {"from": "human", "value": "Why does 0.1 + 0.2 not equal 0.3 in Python?"},
        {"from": "gpt", "value": "Because floats are stored in binary, and 0.1 and 0.2 have no exact binary representation; their rounded sum differs from the rounded 0.3 in the last bit. Use math.isclose or decimal.Decimal when exactness matters."},
    ]},
    {"id": "sg-003", "conversations": [
        {"from": "human", "value": "Wie sortiere ich ein Wörterbuch nach seinen Werten?"},
        {"from": "gpt", "value": "Mit sorted(d.items(), key=lambda kv: kv[1]) erhältst du eine Liste von Paaren, nach Wert sortiert; dict(...) macht daraus wieder ein Wörterbuch."},
    ]},
    # personal data that curation redacts (e-mail, phone) ...
    {"id": "sg-004", "conversations": [
        {"from": "human", "value": "My build server at 81.2.69.160 keeps failing. Can you reach me at maria.lopez@example.org or on +44 20 7946 0958 to debug it?"},
        {"from": "gpt", "value": "I cannot contact you directly, but share the failing log and the exact pip command and I will go through the error with you here."},
    ]},
    # the same conversation as demo_chat's chat-0002 (an exact duplicate in another source) ...
    {"id": "sg-006", "conversations": [
        {"from": "human", "value": "What is the difference between a list and a tuple?"},
        {"from": "gpt", "value": "A list is mutable and a tuple is immutable. Tuples can be dictionary keys when their items are hashable; lists cannot."},
        {"from": "human", "value": "And performance?"},
        {"from": "gpt", "value": "Tuples are slightly smaller and faster to create, but choose by meaning: fixed records are tuples, growing collections are lists."},
    ]},
    # ... and a near duplicate of it (one word changed)
    {"id": "sg-007", "conversations": [
        {"from": "human", "value": "What is the difference between a list and a tuple?"},
        {"from": "gpt", "value": "A list is mutable and a tuple is immutable. Tuples can be dictionary keys when their items are hashable; lists cannot."},
        {"from": "human", "value": "And performance?"},
        {"from": "gpt", "value": "Tuples are slightly smaller and quicker to create, but choose by meaning: fixed records are tuples, growing collections are lists."},
    ]},
    # ... and a payment card number, which the demo policy quarantines instead
    {"id": "sg-005", "conversations": [
        {"from": "human", "value": "Is my card 4111 1111 1111 1111 still valid for the online store?"},
        {"from": "gpt", "value": "I can't check card status. Please contact your bank, and avoid sharing card numbers in chats."},
    ]},
]

_ALPACA = [
    {"instruction": "Write a one-line shell command that counts the lines of every .py file in the current directory.", "input": "", "output": "wc -l *.py"},
    {"instruction": "Summarize the text.", "input": "The pathlib module offers classes representing filesystem paths with semantics appropriate for different operating systems. Path classes are divided between pure paths, which provide purely computational operations without I/O, and concrete paths, which inherit from pure paths but also provide I/O operations.", "output": "pathlib represents filesystem paths as objects: pure paths compute, concrete paths also do I/O."},
    {"instruction": "Give an antonym.", "input": "ascending", "output": "descending"},
    {"instruction": "Rewrite this loop as a list comprehension.", "input": "result = []\nfor x in items:\n    if x > 0:\n        result.append(x * 2)", "output": "result = [x * 2 for x in items if x > 0]"},
    # missing the required output: quarantined as a schema violation, not guessed
    {"instruction": "Name three HTTP methods.", "input": ""},
]

_PREFERENCES = [
    {"id": "pref-01", "prompt": "How should I store user passwords?", "chosen": "Store only a slow, salted hash such as Argon2id or bcrypt, never the password itself, and compare hashes in constant time.", "rejected": "Encrypt them with AES and keep the key next to the database so you can decrypt them when users forget their password."},
    {"id": "pref-02", "prompt": "Is it safe to use eval on user input in Python?", "chosen": "No. eval executes arbitrary code. Parse the input instead, for example with ast.literal_eval for Python literals or json.loads for JSON.", "rejected": "Yes, as long as you strip the whitespace first."},
    {"id": "pref-03", "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What does HTTP status 404 mean?"}], "chosen": [{"role": "assistant", "content": "Not Found: the server has no resource at that URL."}], "rejected": [{"role": "assistant", "content": "The server crashed."}]},
]

_REASONING = [
    {"id": "r-001", "problem": "A train travels 180 km in 2.5 hours. What is its average speed in km/h?", "solution": "Average speed is distance divided by time: 180 / 2.5 = 72.", "answer": "72", "verdict": "correct"},
    {"id": "r-002", "problem": "What is the sum of the first 100 positive integers?", "solution": "Pair the numbers: (1 + 100) + (2 + 99) + ... gives 50 pairs of 101, so 50 * 101 = 5050.", "answer": "5050", "verdict": "correct"},
    {"id": "r-003", "problem": "How many ways can 3 books be arranged on a shelf?", "solution": "There are 3 choices for the first slot, 2 for the second and 1 for the last: 3 + 2 + 1 = 6.", "answer": "6", "verdict": "unverified"},
]

_TASKS = [
    {"task_id": "t-gcd-01", "input": "Compute gcd(462, 1071). Give the final answer in \\boxed{}.", "reference": "21", "metadata": {"type": "number_theory"}},
    {"task_id": "t-frac-02", "input": "Simplify 84/126 to lowest terms. Give the final answer in \\boxed{}.", "reference": "2/3", "metadata": {"type": "fractions"}},
    {"task_id": "t-mod-03", "input": "What is 7^222 mod 10? Give the final answer in \\boxed{}.", "reference": "9", "metadata": {"type": "modular"}},
]


def _jsonl(rows) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in rows)


def write_demo_inputs(root: Path) -> dict[str, Path]:
    """Write the demo dumps under ``root`` (owner-only) and return {name: path}."""
    root.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    _owner_only(root)  # before any byte is written, and whatever an earlier run left
    files = {
        "chat/openai_messages.jsonl": _jsonl(_CHAT)
        + b'{"id": "chat-0006", "messages": [{"role": "user", "content": "unterminated\n'  # malformed JSON
        + b"\n"  # blank line
        + b'{"id": "chat-0007", "messages": [{"role": "user", "content": "caf\xe9"}]}\n',  # invalid UTF-8 (latin-1 byte)
        "chat/sharegpt.jsonl": _jsonl(_SHAREGPT),
        "instructions/alpaca.jsonl": _jsonl(_ALPACA),
        "preferences/pairs.jsonl": _jsonl(_PREFERENCES),
        "reasoning/math.jsonl": _jsonl(_REASONING),
        "tasks/math_tasks.jsonl": _jsonl(_TASKS),
    }
    out = {}
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        for d in [p.parent, *p.parent.parents]:  # mkdir's mode is reduced by the umask
            if d == root:
                break
            os.chmod(d, _DIR_MODE)
        if not p.exists() or p.read_bytes() != data:
            atomic_write_bytes(p, data, mode=_FILE_MODE)
        out[rel] = p
    return out


def _owner_only(root: Path) -> None:
    """0700 on ``root`` and every directory below it, 0600 on every regular file (symlinks are
    left alone: chmod would follow them out of the tree)."""
    os.chmod(root, _DIR_MODE)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                os.chmod(path, _DIR_MODE)
            elif stat.S_ISREG(st.st_mode):
                os.chmod(path, _FILE_MODE)
