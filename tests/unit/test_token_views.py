"""Token views (issue 5): EOS, loss masks per kind, shared preference prompt, reasoning policies,
no private reference in task views, template errors, too-long reason code, offsets, determinism,
cache keys and bounded batches."""

from __future__ import annotations

import numpy as np
import pytest

from corpus_assets.domain.core.hashing import dedup_key, sha256_text
from corpus_assets.domain.canonical.records import (
    SCHEMA_VERSIONS,
    DocumentPayload,
    InstructionPayload,
    Message,
    MessagesPayload,
    PreferencePayload,
    ReasoningPayload,
    Record,
    TaskPayload,
    ToolCall,
    raw_parent_id,
    record_digest,
    text_view,
)
from corpus_assets.domain.ingest.sources_config import Governance
from corpus_assets.domain.tokens.token_views import (
    REASON_TOO_LONG,
    ChatTemplateError,
    Rejected,
    TokenView,
    TokenViewPolicy,
    cache_key,
    iter_token_view_batches,
    render,
    rendered_text,
    token_views,
    view_policy_version,
    views_to_table,
)
from corpus_assets.domain.tokens.tokenizer import BpeTrainSpec, TokenizerSpec, train_bpe

GOV = Governance(license="CC-BY-4.0", rights_evidence="https://example.org/license")
TRAIN = [
    "The quick brown fox jumps over the lazy dog.",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\nIt is 4.<|im_end|>\n",
    "def tokenize(text):\n    return text.split()\n",
    "Ünïcödé café naïve — “quoted” text, 日本語, emoji 😀",
    "<think>\nreasoning steps\n</think>\n\nanswer",
] * 20


@pytest.fixture(scope="module")
def tok():
    spec = TokenizerSpec(train=BpeTrainSpec(vocab_size=420, min_frequency=2), special_tokens=["<|endoftext|>"])
    return train_bpe(TRAIN, spec)


def _record(payload, rid: str = "src:r1") -> Record:
    rec = Record.model_validate(
        dict(
            record_id=rid,
            source_id="src",
            snapshot="src.20260101T000000",
            item_id="a.jsonl#L1",
            schema_type=payload.kind,
            schema_version=SCHEMA_VERSIONS[payload.kind],
            adapter="test",
            adapter_version="1",
            domain="prose",
            lang="en",
            group_id="g1",
            parents=[raw_parent_id("src", "a.jsonl#L1")],
            governance=GOV,
            payload=payload,
        )
    )
    tv = text_view(rec)
    rec.text_sha256 = sha256_text(tv)
    rec.dedup_key = dedup_key(tv, rec.domain)
    rec.record_sha256 = record_digest(rec)
    return rec


def _doc(text: str, rid: str = "src:d1") -> Record:
    return _record(DocumentPayload(text=text), rid)


def _trained_text(tok, view: TokenView) -> str:
    return tok.decode(view.input_ids[view.loss_mask == 1].tolist())


def _tool_chat() -> Record:
    return _record(
        MessagesPayload(
            messages=[
                Message(role="system", content="Be brief."),
                Message(role="user", content="Weather in Paris?"),
                Message(role="assistant", tool_calls=[ToolCall(id="c1", name="weather", arguments='{"city":"Paris"}')]),
                Message(role="tool", tool_call_id="c1", content="SUNNY-TOOL-RESULT"),
                Message(role="assistant", content="It is sunny."),
            ]
        ),
        "src:m1",
    )


def test_documents_get_exactly_one_eos_even_if_text_spells_it(tok):
    docs = [_doc("Plain text.", "src:d1"), _doc("A page that says <|endoftext|> inside.", "src:d2"), _doc("x", "src:d3")]
    views = token_views(docs, tok)
    assert len(views) == 3
    for v in views:
        assert isinstance(v, TokenView)
        assert int((v.input_ids == tok.eos_id).sum()) == 1 and v.input_ids[-1] == tok.eos_id
        assert v.loss_mask.all()  # loss on everything, EOS included
        assert tuple(v.offsets[-1]) == (-1, -1)
        assert v.input_ids.dtype == np.int32 and v.loss_mask.dtype == np.uint8 and v.offsets.dtype == np.int32
    assert tok.decode(views[1].input_ids[:-1].tolist()) == "A page that says <|endoftext|> inside."


def test_messages_loss_only_on_assistant_turns_and_tool_pairing_kept(tok):
    rec = _tool_chat()
    (v,) = token_views([rec], tok)
    text = rendered_text(rec)
    assert tok.decode(v.input_ids[:-1].tolist()) == text
    trained = _trained_text(tok, v)
    assert trained == '<tool_call>{"id": "c1", "name": "weather", "arguments": "{\\"city\\":\\"Paris\\"}"}</tool_call><|im_end|>\nIt is sunny.<|im_end|>\n<|endoftext|>'
    for s in ("Be brief.", "Weather in Paris?", "SUNNY-TOOL-RESULT", "<|im_start|>assistant"):
        assert s not in trained
    assert '<tool_response id="c1">SUNNY-TOOL-RESULT</tool_response>' in text
    assert text.index('"id": "c1"') < text.index('<tool_response id="c1">')
    # every segment is a contiguous token range; masks follow the segment kinds
    assert [k for k, _, _ in v.segments] == ["system", "user", "assistant", "tool", "assistant"]
    all_v = token_views([rec], tok, TokenViewPolicy(train_on="all"))[0]
    assert all_v.loss_mask.all()


def test_unknown_role_is_a_clear_error(tok):
    rec = _tool_chat()
    bad = Message.model_construct(role="narrator", content="Once upon a time", tool_calls=[], tool_call_id=None, name=None)
    rec.payload.messages.insert(1, bad)
    with pytest.raises(ChatTemplateError, match=r"'chatml-1' has no role 'narrator' \(record 'src:m1', message 1\)"):
        token_views([rec], tok)


def test_tokenizer_with_other_template_version_is_refused(tok):
    with pytest.raises(ValueError, match="chat template"):
        token_views([_doc("x")], tok.__class__(**{**tok.__dict__, "spec": tok.spec.model_copy(update={"chat_template_version": "chatml-2"})}))


def test_preference_shared_prompt_ids_identical(tok):
    rec = _record(
        PreferencePayload(
            prompt=[Message(role="system", content="Be kind."), Message(role="user", content="Say hi.")],
            chosen=Message(role="assistant", content="Hi there!"),
            rejected=Message(role="assistant", content="Go away."),
        ),
        "src:p1",
    )
    chosen, rejected = token_views([rec], tok)
    assert (chosen.variant, rejected.variant) == ("chosen", "rejected")
    assert chosen.record_id == rejected.record_id == "src:p1"
    pc = [s for s in chosen.segments if s[0] not in ("chosen", "rejected")]
    pr = [s for s in rejected.segments if s[0] not in ("chosen", "rejected")]
    assert pc == pr
    end = pc[-1][2]
    assert np.array_equal(chosen.input_ids[:end], rejected.input_ids[:end])
    assert np.array_equal(chosen.offsets[:end], rejected.offsets[:end])
    assert not chosen.loss_mask[:end].any() and not rejected.loss_mask[:end].any()
    assert _trained_text(tok, chosen) == "Hi there!<|im_end|>\n<|endoftext|>"
    assert _trained_text(tok, rejected) == "Go away.<|im_end|>\n<|endoftext|>"
    assert tok.decode(rejected.input_ids[:-1].tolist()) == rendered_text(rec, variant="rejected")


def test_reasoning_policies_change_masks_as_declared(tok):
    rec = _record(ReasoningPayload(problem="What is 2+2?", process="two plus two", answer="4", verdict="correct"), "src:q1")
    whole = token_views([rec], tok, TokenViewPolicy(reasoning="whole_trace"))[0]
    answer = token_views([rec], tok, TokenViewPolicy(reasoning="answer_only"))[0]
    prompt = token_views([rec], tok, TokenViewPolicy(reasoning="prompt_only"))[0]
    assert whole.meta == {"verdict": "correct"}
    assert np.array_equal(whole.input_ids, answer.input_ids)  # same tokens, different mask
    assert _trained_text(tok, whole) == "<think>\ntwo plus two\n</think>\n\n4<|im_end|>\n<|endoftext|>"
    assert _trained_text(tok, answer) == "4<|im_end|>\n<|endoftext|>"
    assert int(answer.loss_mask.sum()) < int(whole.loss_mask.sum())
    assert not prompt.loss_mask.any() and tok.eos_id not in prompt.input_ids
    decoded = tok.decode(prompt.input_ids.tolist())
    assert decoded == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert "two plus two" not in decoded


def test_instruction_trains_on_output_only(tok):
    rec = _record(InstructionPayload(instruction="Translate.", input="chat", output="cat"), "src:i1")
    (v,) = token_views([rec], tok)
    assert _trained_text(tok, v) == "cat<|im_end|>\n<|endoftext|>"


def test_task_view_is_public_input_only(tok):
    reference = "SECRET-REFERENCE-ANSWER-42"  # held privately by the adapter, never in the record
    rec = _record(TaskPayload(input="Compute 6*7.", metadata={"difficulty": "easy"}), "src:t1")
    (v,) = token_views([rec], tok)
    decoded = tok.decode(v.input_ids.tolist())
    assert decoded == "<|im_start|>user\nCompute 6*7.<|im_end|>\n<|im_start|>assistant\n"
    assert reference not in decoded and "42" not in decoded and "easy" not in decoded
    assert not v.loss_mask.any() and tok.eos_id not in v.input_ids


def test_too_long_is_a_reason_code_not_an_exception(tok):
    short, long_ = _doc("hi", "src:s"), _doc("word " * 200, "src:l")
    pref = _record(
        PreferencePayload(
            prompt=[Message(role="user", content="q")],
            chosen=Message(role="assistant", content="a"),
            rejected=Message(role="assistant", content="b " * 100),
        ),
        "src:p",
    )
    out = token_views([short, long_, pref], tok, TokenViewPolicy(max_tokens=40))
    assert isinstance(out[0], TokenView)
    assert isinstance(out[1], Rejected) and out[1].reason == REASON_TOO_LONG == "token_views.too_long"
    assert out[1].record_id == "src:l" and "max_tokens 40" in out[1].detail
    assert len(out) == 3 and isinstance(out[2], Rejected) and out[2].record_id == "src:p"  # whole record


def test_offsets_map_tokens_back_to_rendered_text(tok):
    recs = [_doc("Ünïcödé café — “quoted”, 日本語 😀 and   spaces\n\nend", "src:u"), _tool_chat()]
    for rec, v in zip(recs, token_views(recs, tok)):
        text = rendered_text(rec)
        checked = 0
        for i in range(len(v)):
            s, e = (int(x) for x in v.offsets[i])
            if (s, e) == (-1, -1):
                assert v.input_ids[i] == tok.eos_id
                continue
            piece = tok.decode([int(v.input_ids[i])])
            if "\ufffd" in piece:  # a byte of a multi-byte character: the token covers that character
                assert e - s >= 1 and 0 <= s < e <= len(text)
                continue
            assert piece == text[s:e], (i, piece, text[s:e])
            checked += 1
        assert checked > len(v) // 2
        # non-inserted offsets are monotone and cover the text
        real = v.offsets[v.offsets[:, 0] >= 0]
        assert real[0, 0] == 0 and real[-1, 1] == len(text)
        assert (np.diff(real[:, 0]) >= 0).all()


def test_deterministic_and_render_is_pure(tok):
    recs = [_doc("alpha beta", "src:a"), _tool_chat()]
    a, b = token_views(recs, tok), token_views(list(recs), tok)
    for x, y in zip(a, b):
        assert np.array_equal(x.input_ids, y.input_ids) and np.array_equal(x.loss_mask, y.loss_mask)
        assert np.array_equal(x.offsets, y.offsets) and x.segments == y.segments and x.cache_key == y.cache_key
    assert render(recs[1]) == render(recs[1])
    # batching does not change a record's view
    alone = token_views([recs[1]], tok)[0]
    assert np.array_equal(alone.input_ids, a[1].input_ids)


def test_cache_key_changes_with_every_component(tok):
    p = view_policy_version(TokenViewPolicy())
    assert p == view_policy_version(TokenViewPolicy())
    versions = {p} | {
        view_policy_version(TokenViewPolicy(**kw))
        for kw in ({"reasoning": "answer_only"}, {"reasoning": "prompt_only"}, {"max_tokens": 10}, {"train_on": "all"})
    }
    assert len(versions) == 5
    base = cache_key("r" * 64, "t" * 64, p)
    assert base == cache_key("r" * 64, "t" * 64, p)
    assert len({base, cache_key("s" * 64, "t" * 64, p), cache_key("r" * 64, "u" * 64, p), cache_key("r" * 64, "t" * 64, p + "x")}) == 4
    assert cache_key("ab", "c", "d") != cache_key("a", "bc", "d")


def test_cache_skips_encoding_and_returns_same_views(tok):
    cache: dict = {}
    recs = [_doc("cached text", "src:c")]
    first = token_views(recs, tok, cache=cache)
    assert len(cache) == 1 and first[0].cache_key in cache
    second = token_views(recs, tok, cache=cache)
    assert second[0] is first[0]


def test_bounded_batches_and_table(tok):
    recs = [_doc(f"document number {i} " * (i + 1), f"src:b{i}") for i in range(10)]
    batches = list(iter_token_view_batches(recs, tok, max_records=3, max_chars=10**6))
    assert [len(b) for b in batches] == [3, 3, 3, 1]
    flat = [v for b in batches for v in b]
    ref = token_views(recs, tok)
    assert all(np.array_equal(x.input_ids, y.input_ids) for x, y in zip(flat, ref))
    assert len(list(iter_token_view_batches(recs, tok, max_chars=50))) >= 5
    table = views_to_table(flat)
    assert table.num_rows == 10
    assert table.column("input_ids")[3].as_py() == ref[3].input_ids.tolist()
    assert table.column("offsets")[0].as_py() == ref[0].offsets.reshape(-1).tolist()


def test_offsets_from_byte_lengths_equal_tokenizers_offsets(tok):
    from corpus_assets.domain.tokens import token_views as tv

    enc, blen = tv._encoder(tok)
    assert blen is not None  # byte-level BPE: the fast path is in use
    texts = [
        "plain ascii text, numbers 12345",
        "Ünïcödé café naïve — “quoted” text, 日本語, emoji 😀👍🏽 and\n\n\ttabs",
        "<|endoftext|><|im_start|>user\n",
        "\u00e9\u0301 combining, \U0001f600\U0001f600 surrogates-free",
    ]
    for text, e in zip(texts, enc.encode_batch(texts, add_special_tokens=False)):
        ids = np.array(e.ids, dtype=np.int32)
        fast = tv._char_offsets(text, ids, blen, e)
        assert fast.tolist() == [list(o) for o in e.offsets], text
        slow = tv._char_offsets(text, ids, None, e)
        assert np.array_equal(fast, slow)
    # a tokenizer with a normalizer cannot use byte lengths
    assert tv._byte_lengths('{"normalizer": {"type": "NFC"}, "pre_tokenizer": null, "model": {"type": "BPE"}}') is None


def test_a_batch_of_mixed_records_gives_the_rows_of_each_record_built_alone(tok):
    """A task tokenizes its cache misses as one batch and builds their rows as columns; the views
    and decisions must be the ones each record gets alone (owners, order, counts, rejections)."""
    import pyarrow as pa

    from corpus_assets.domain.tokens.token_views_tasks import ViewStats, _miss_rows

    pref = _record(PreferencePayload(prompt=[Message(role="user", content="Say hi.")],
                                     chosen=Message(role="assistant", content="Hi there!"),
                                     rejected=Message(role="assistant", content="Go away.")), "src:p1")
    long_doc = _doc("word " * 400, "src:long")
    chunk = [(_doc("First page.", "src:a"), "train", None), (pref, "test", None), (long_doc, "train", None),
             (_tool_chat(), "validation", None), (_doc("Last page, a bit longer than the first.", "src:z"), "train", None)]
    policy = TokenViewPolicy(max_tokens=600)
    pver = view_policy_version(policy)
    batch_stats = ViewStats()
    views, decided = _miss_rows(chunk, tok, pver, policy, batch_stats)
    alone_stats = ViewStats()
    alone = [_miss_rows([item], tok, pver, policy, alone_stats) for item in chunk]
    assert views.equals(pa.concat_tables([v for v, _ in alone if v is not None]))
    assert decided.equals(pa.concat_tables([d for _, d in alone]))
    assert batch_stats.to_json() == alone_stats.to_json()
    # the preference record has two views, the long document none (a reject decision), the rest one
    assert views.column("record_id").to_pylist() == ["src:a", "src:p1", "src:p1", "src:m1", "src:z"]
    assert views.column("split").to_pylist() == ["train", "test", "test", "validation", "train"]
    assert decided.column("action").to_pylist() == ["accept", "accept", "reject", "accept", "accept"]
    assert decided.column("tokens_out").to_pylist()[1] == sum(views.column("n_tokens").to_pylist()[1:3])
    assert dict(batch_stats.rejected) == {REASON_TOO_LONG: 1} and batch_stats.tokenized_records == 5
