"""Token views: input ids, loss mask and character offsets for every record of a release.

``render`` turns a record into ``Segment`` pieces of text, each trainable or not; every segment is
encoded on its own (one ``encode_batch`` per batch, ``add_special_tokens=False``, special tokens
encoded as plain text) and a view is their concatenation plus at most one inserted EOS (offsets
``(-1, -1)``). So the loss mask never splits a token and a shared prompt has the same ids in every
view. Preference records give two views (``chosen`` / ``rejected``); a too-long record comes back
as ``Rejected``. Views are cached by ``cache_key(record digest, tokenizer digest, view policy
version)`` and built in bounded batches (``iter_token_view_batches``).

Rendering, loss and template decisions: docs/tokens.md#token-views
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Literal, MutableMapping, Optional, Sequence, TypeVar, Union

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field
from tokenizers import Tokenizer

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.canonical.records import Message, Record, record_digest
from corpus_assets.domain.tokens.tokenizer import FrozenTokenizer, gpt2_bytes_to_unicode

__all__ = [
    "TOKEN_VIEWS_CODE_VERSION",
    "REASON_TOO_LONG",
    "ChatTemplate",
    "CHAT_TEMPLATES",
    "ChatTemplateError",
    "TokenViewPolicy",
    "view_policy_version",
    "cache_key",
    "Segment",
    "render",
    "rendered_text",
    "TokenView",
    "Rejected",
    "token_views",
    "iter_token_view_batches",
    "bounded_chunks",
    "payload_chars",
    "TOKEN_VIEWS_SCHEMA",
    "views_to_table",
]

TOKEN_VIEWS_CODE_VERSION = "1"
REASON_TOO_LONG = "token_views.too_long"


# --- chat templates -----------------------------------------------------------------------------


class ChatTemplateError(CorpusError, ValueError):
    """A record cannot be rendered with the chat template (e.g. a role the template does not know)."""


@dataclass(frozen=True)
class ChatTemplate:
    name: str
    roles: tuple[str, ...]
    turn_start: str  # formatted with role
    turn_end: str
    think_open: str = "<think>\n"
    think_close: str = "\n</think>\n\n"

    def header(self, role: str) -> str:
        return self.turn_start.format(role=role)


CHAT_TEMPLATES: dict[str, ChatTemplate] = {
    "chatml-1": ChatTemplate(
        name="chatml-1",
        roles=("system", "user", "assistant", "tool"),
        turn_start="<|im_start|>{role}\n",
        turn_end="<|im_end|>\n",
    ),
}


# --- policy / cache key -------------------------------------------------------------------------


class TokenViewPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    chat_template: Literal["chatml-1"] = "chatml-1"
    reasoning: Literal["whole_trace", "answer_only", "prompt_only"] = "whole_trace"
    train_on: Literal["assistant", "all"] = Field(
        default="assistant", description="chat-like records: loss on assistant turns only, or on every token"
    )
    max_tokens: Optional[int] = Field(
        default=None, ge=1, description="longer views -> Rejected(reason='token_views.too_long')"
    )


def view_policy_version(policy: TokenViewPolicy) -> str:
    """``tv<code version>-<12 hex>``: changes with the code version, the template and any policy field."""
    payload = {"code": TOKEN_VIEWS_CODE_VERSION, "policy": policy.model_dump(mode="json")}
    h = hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"tv{TOKEN_VIEWS_CODE_VERSION}-{h[:12]}"


def cache_key(record_digest_hex: str, tokenizer_digest: str, policy_version: str) -> str:
    """Content address of a record's views: sha256 over the three components (length-prefixed, so
    no two different triples can collide by concatenation)."""
    h = hashlib.sha256()
    for part in (record_digest_hex, tokenizer_digest, policy_version):
        b = part.encode("utf-8")
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return h.hexdigest()


# --- rendering ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    text: str
    trainable: bool
    kind: str  # document | system | user | assistant | tool | process | answer | chosen | rejected


def _role_header(tpl: ChatTemplate, m: Message, record_id: str, i: int) -> str:
    if m.role not in tpl.roles:
        raise ChatTemplateError(
            f"chat template {tpl.name!r} has no role {m.role!r} (record {record_id!r}, message {i}); "
            f"known roles: {list(tpl.roles)}"
        )
    return tpl.header(m.role)


def _tool_call_json(call) -> str:
    return json.dumps({"id": call.id, "name": call.name, "arguments": call.arguments}, ensure_ascii=False)


def _assistant_body(tpl: ChatTemplate, m: Message) -> str:
    parts = [m.content] if m.content else []
    parts += [f"<tool_call>{_tool_call_json(c)}</tool_call>" for c in m.tool_calls]
    return "\n".join(parts) + tpl.turn_end


def _message_segments(
    tpl: ChatTemplate, messages: Sequence[Message], train_all: bool, record_id: str, out: list[Segment]
) -> None:
    for i, m in enumerate(messages):
        header = _role_header(tpl, m, record_id, i)
        if m.role == "assistant":
            out.append(Segment(header, train_all, "assistant"))
            out.append(Segment(_assistant_body(tpl, m), True, "assistant"))
        elif m.role == "tool":
            body = f'<tool_response id="{m.tool_call_id}">{m.content}</tool_response>'
            out.append(Segment(header + body + tpl.turn_end, train_all, "tool"))
        else:
            name = f"[{m.name}] " if m.name else ""
            out.append(Segment(header + name + m.content + tpl.turn_end, train_all, m.role))


def render(record: Record, policy: TokenViewPolicy = TokenViewPolicy()) -> list[Segment]:
    """Segments of a record under ``policy`` (see docs/tokens.md#token-views). Preference records return the
    prompt segments followed by the ``chosen`` and then the ``rejected`` segments; every other kind
    returns the segments of its single view in order."""
    tpl = CHAT_TEMPLATES[policy.chat_template]
    p = record.payload
    kind = p.kind
    train_all = policy.train_on == "all"
    rid = record.record_id
    out: list[Segment] = []
    if kind == "document":
        out.append(Segment(p.text, True, "document"))
    elif kind == "messages":
        _message_segments(tpl, p.messages, train_all, rid, out)
    elif kind == "preference":
        _message_segments(tpl, p.prompt, train_all, rid, out)
        gen = tpl.header("assistant")
        for side in ("chosen", "rejected"):
            m = getattr(p, side)
            out.append(Segment(gen, train_all, side))
            out.append(Segment(m.content + tpl.turn_end, True, side))
    elif kind == "instruction":
        user = p.instruction + ("\n\n" + p.input if p.input else "")
        out.append(Segment(tpl.header("user") + user + tpl.turn_end, train_all, "user"))
        out.append(Segment(tpl.header("assistant"), train_all, "assistant"))
        out.append(Segment(p.output + tpl.turn_end, True, "assistant"))
    elif kind == "reasoning":
        out.append(Segment(tpl.header("user") + p.problem + tpl.turn_end, train_all, "user"))
        if policy.reasoning == "prompt_only":
            out.append(Segment(tpl.header("assistant"), train_all, "assistant"))
        else:
            out.append(Segment(tpl.header("assistant"), train_all, "assistant"))
            process_trainable = policy.reasoning == "whole_trace" or train_all
            out.append(Segment(tpl.think_open + p.process + tpl.think_close, process_trainable, "process"))
            out.append(Segment(p.answer + tpl.turn_end, True, "answer"))
    elif kind == "task":
        out.append(Segment(tpl.header("user") + p.input + tpl.turn_end, train_all, "user"))
        out.append(Segment(tpl.header("assistant"), train_all, "assistant"))
    else:  # pragma: no cover - the payload union is closed
        raise TypeError(f"unknown payload kind {kind!r}")
    return out


def _adds_eos(record: Record, policy: TokenViewPolicy) -> bool:
    kind = record.payload.kind
    if kind == "task":
        return False
    if kind == "reasoning" and policy.reasoning == "prompt_only":
        return False
    return True


def _view_plans(segments: list[Segment]) -> list[tuple[Optional[str], list[int]]]:
    """(variant, segment indices) of each view of a rendered record."""
    sides = {s.kind for s in segments} & {"chosen", "rejected"}
    if not sides:
        return [(None, list(range(len(segments))))]
    prompt = [i for i, s in enumerate(segments) if s.kind not in ("chosen", "rejected")]
    return [(side, prompt + [i for i, s in enumerate(segments) if s.kind == side]) for side in ("chosen", "rejected")]


def rendered_text(record: Record, policy: TokenViewPolicy = TokenViewPolicy(), variant: Optional[str] = None) -> str:
    """The text a view's offsets point into (``variant`` = "chosen" / "rejected" for preference)."""
    segs = render(record, policy)
    for v, idx in _view_plans(segs):
        if v == variant:
            return "".join(segs[i].text for i in idx)
    raise ValueError(f"record {record.record_id!r} has no view variant {variant!r}")


# --- views --------------------------------------------------------------------------------------


@dataclass
class TokenView:
    record_id: str
    variant: Optional[str]  # None, or "chosen" / "rejected" for preference records
    input_ids: np.ndarray  # int32 (n,)
    loss_mask: np.ndarray  # uint8 (n,)
    offsets: np.ndarray  # int32 (n, 2): char offsets into rendered_text; (-1, -1) for inserted tokens
    segments: list[tuple[str, int, int]]  # (kind, start_tok, end_tok), in order, EOS excluded
    cache_key: str = ""
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(frozen=True)
class Rejected:
    record_id: str
    reason: str
    detail: str = ""


_ENCODERS: dict[str, tuple[Tokenizer, Optional[np.ndarray]]] = {}


def _byte_lengths(tokenizer_json: str) -> Optional[np.ndarray]:
    """Bytes per token id when offsets can be derived from ids alone: byte-level BPE with no
    normalizer, a ByteLevel pre-tokenizer without prefix space, and no non-special added tokens
    (special ones are encoded as text). Else ``None`` (offsets then come from ``Encoding.offsets``)."""
    d = json.loads(tokenizer_json)
    pre = d.get("pre_tokenizer") or {}
    model = d.get("model") or {}
    if d.get("normalizer") is not None or model.get("type") != "BPE":
        return None
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space"):
        return None
    if any(not t.get("special") for t in d.get("added_tokens") or []):
        return None
    alphabet = set(gpt2_bytes_to_unicode().values())
    vocab: dict[str, int] = model.get("vocab") or {}
    size = max([*vocab.values(), *(t["id"] for t in d.get("added_tokens") or [])], default=-1) + 1
    lengths = np.zeros(size, dtype=np.int64)
    for token, i in vocab.items():
        if not all(c in alphabet for c in token):
            return None
        lengths[i] = len(token)  # one alphabet character per byte
    for t in d.get("added_tokens") or []:
        lengths[t["id"]] = len(t["content"].encode("utf-8"))
    return lengths


def _encoder(tok: FrozenTokenizer) -> tuple[Tokenizer, Optional[np.ndarray]]:
    """A private copy of the tokenizer that encodes special-token text as plain text, and its
    byte-length table (or ``None``)."""
    entry = _ENCODERS.get(tok.digest)
    if entry is None:
        text = tok.tokenizer.to_str()
        enc = Tokenizer.from_str(text)
        enc.encode_special_tokens = True
        entry = (enc, _byte_lengths(text))
        _ENCODERS[tok.digest] = entry
    return entry


def _char_offsets(text: str, ids: np.ndarray, blen: Optional[np.ndarray], encoding) -> np.ndarray:
    """(k, 2) int32 char offsets of a segment's tokens: from the byte lengths of the ids when the
    tokenizer allows it and they add up to the text's UTF-8 length, else ``Encoding.offsets``.
    Same convention as ``tokenizers``: start = char holding the first byte, end = 1 + char holding
    the last byte."""
    k = ids.shape[0]
    out = np.empty((k, 2), dtype=np.int32)
    if blen is not None and k:
        lengths = blen[ids]
        ends = np.cumsum(lengths)
        if text.isascii():
            if int(ends[-1]) == len(text):
                out[:, 1] = ends
                out[:, 0] = ends - lengths
                return out
        else:
            raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
            if int(ends[-1]) == raw.shape[0]:
                char_of_byte = np.cumsum((raw & 0xC0) != 0x80) - 1
                out[:, 0] = char_of_byte[ends - lengths]
                out[:, 1] = char_of_byte[ends - 1] + 1
                return out
    if k:
        out[:] = encoding.offsets
    return out


def _record_digest(record: Record) -> str:
    return record.record_sha256 or record_digest(record)


def token_views(
    records: Sequence[Record],
    tok: FrozenTokenizer,
    policy: TokenViewPolicy = TokenViewPolicy(),
    *,
    cache: Optional[MutableMapping[str, list]] = None,
) -> list[Union[TokenView, Rejected]]:
    """Views of ``records`` in order: a preference record contributes two ``TokenView`` (chosen,
    rejected), every other record one; a record over ``policy.max_tokens`` contributes one
    ``Rejected``. All segments of all records (cache misses) are encoded by ONE ``encode_batch``."""
    if tok.spec.chat_template_version != policy.chat_template:
        raise ValueError(
            f"tokenizer was frozen with chat template {tok.spec.chat_template_version!r} "
            f"but the policy uses {policy.chat_template!r}"
        )
    pver = view_policy_version(policy)
    enc_tok, blen = _encoder(tok)
    eos = np.int32(tok.eos_id)
    max_tokens = policy.max_tokens

    keys: list[str] = []
    results: list[Optional[list]] = []
    plans: list[tuple[int, list[Segment], int]] = []  # (result index, segments, first text index)
    texts: list[str] = []
    for r in records:
        key = cache_key(_record_digest(r), tok.digest, pver)
        keys.append(key)
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            results.append(hit)
            continue
        segs = render(r, policy)
        plans.append((len(results), segs, len(texts)))
        results.append(None)
        texts.extend(s.text for s in segs)

    encs = enc_tok.encode_batch(texts, add_special_tokens=False) if texts else []

    for ri, segs, first in plans:
        r = records[ri]
        ids_l: list[np.ndarray] = []
        off_l: list[np.ndarray] = []
        for j, s in enumerate(segs):
            e = encs[first + j]
            a = np.array(e.ids, dtype=np.int32)
            ids_l.append(a)
            off_l.append(_char_offsets(s.text, a, blen, e))
        add_eos = _adds_eos(r, policy)
        views: list = []
        for variant, idx in _view_plans(segs):
            n = sum(len(ids_l[i]) for i in idx) + (1 if add_eos else 0)
            if max_tokens is not None and n > max_tokens:
                views = [Rejected(r.record_id, REASON_TOO_LONG, f"{n} tokens > max_tokens {max_tokens}")]
                break
            ids = np.empty(n, dtype=np.int32)
            mask = np.empty(n, dtype=np.uint8)
            offs = np.empty((n, 2), dtype=np.int32)
            seg_spans: list[tuple[str, int, int]] = []
            pos = 0
            char = 0
            for i in idx:
                s = segs[i]
                k = len(ids_l[i])
                if k:
                    ids[pos : pos + k] = ids_l[i]
                    mask[pos : pos + k] = 1 if s.trainable else 0
                    offs[pos : pos + k] = off_l[i]
                    if char:
                        offs[pos : pos + k] += char
                if seg_spans and seg_spans[-1][0] == s.kind and seg_spans[-1][2] == pos:
                    seg_spans[-1] = (s.kind, seg_spans[-1][1], pos + k)
                else:
                    seg_spans.append((s.kind, pos, pos + k))
                pos += k
                char += len(s.text)
            if add_eos:
                ids[pos] = eos
                mask[pos] = 1 if segs[idx[-1]].trainable else 0
                offs[pos] = -1
            meta = {"verdict": r.payload.verdict} if r.payload.kind == "reasoning" else {}
            views.append(TokenView(r.record_id, variant, ids, mask, offs, seg_spans, keys[ri], meta))
        results[ri] = views
        if cache is not None:
            cache[keys[ri]] = views

    out: list[Union[TokenView, Rejected]] = []
    for vs in results:
        out.extend(vs)  # type: ignore[arg-type]
    return out


def iter_token_view_batches(
    records: Iterable[Record],
    tok: FrozenTokenizer,
    policy: TokenViewPolicy = TokenViewPolicy(),
    *,
    max_records: int = 1024,
    max_chars: int = 4_000_000,
    cache: Optional[MutableMapping[str, list]] = None,
) -> Iterator[list[Union[TokenView, Rejected]]]:
    """Bounded batches: at most ``max_records`` records and about ``max_chars`` characters of payload
    text each (a single larger record is its own batch), one ``encode_batch`` per batch."""
    for batch in bounded_chunks(records, payload_chars, max_records=max_records, max_chars=max_chars):
        yield token_views(batch, tok, policy, cache=cache)


T = TypeVar("T")


def bounded_chunks(items: Iterable[T], size_of: Callable[[T], int], *, max_records: int = 1024,
                   max_chars: int = 4_000_000) -> Iterator[list[T]]:
    """Consecutive chunks of at most ``max_records`` items and about ``max_chars`` characters (a
    single larger item is its own chunk); boundaries depend on the items only."""
    if max_records < 1 or max_chars < 1:
        raise ValueError("max_records and max_chars must be positive")
    chunk: list[T] = []
    chars = 0
    for item in items:
        size = size_of(item)
        if chunk and (len(chunk) >= max_records or chars + size > max_chars):
            yield chunk
            chunk, chars = [], 0
        chunk.append(item)
        chars += size
    if chunk:
        yield chunk


def payload_chars(r: Record) -> int:
    """Characters a record's views are rendered from (the batching measure)."""
    p = r.payload
    if p.kind == "document":
        return len(p.text)
    return sum(len(s.text) for s in render(r))


TOKEN_VIEWS_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("variant", pa.string()),
        ("cache_key", pa.string()),
        ("n_tokens", pa.int32()),
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.uint8())),
        ("offsets", pa.list_(pa.int32())),  # flattened (start, end) pairs
        ("segments_json", pa.string()),
    ]
)


def views_to_table(views: Sequence[TokenView]) -> pa.Table:
    """Arrow table of a batch of views (``Rejected`` entries are the caller's decisions, not rows)."""
    vs = [v for v in views if isinstance(v, TokenView)]

    def lists(arrs, typ):
        lengths = np.fromiter((a.size for a in arrs), dtype=np.int64, count=len(arrs))
        offsets = np.zeros(len(arrs) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.concatenate([a.reshape(-1) for a in arrs]) if arrs else np.empty(0, typ.to_pandas_dtype())
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(flat, typ))

    return pa.table(
        {
            "record_id": pa.array([v.record_id for v in vs], pa.string()),
            "variant": pa.array([v.variant for v in vs], pa.string()),
            "cache_key": pa.array([v.cache_key for v in vs], pa.string()),
            "n_tokens": pa.array([len(v) for v in vs], pa.int32()),
            "input_ids": lists([v.input_ids for v in vs], pa.int32()),
            "loss_mask": lists([v.loss_mask for v in vs], pa.uint8()),
            "offsets": lists([v.offsets for v in vs], pa.int32()),
            "segments_json": pa.array([json.dumps(v.segments, separators=(",", ":")) for v in vs], pa.string()),
        },
        schema=TOKEN_VIEWS_SCHEMA,
    )
