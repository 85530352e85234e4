"""Build GPT-2's HuggingFace tokenizer.json from the vocabulary inside the openai-whisper package.

No hub is touched. ``whisper/assets/gpt2.tiktoken`` (base64 token bytes -> rank; byte-identical
to tiktoken's ``r50k_base.tiktoken``, checked by sha256) comes from, in order: ``--tiktoken-file``,
an installed ``whisper`` package, or ``pip download --no-deps --no-binary :all:
openai-whisper==<pinned>`` into a temporary directory (a source archive only; torch is never
installed). The ranks become a byte-level BPE tokenizer.json: vocab = GPT-2 byte-to-unicode
encoded token -> rank, merges reconstructed from the ranks (each token of length > 1 is split by
running BPE on its bytes with only lower-ranked merges, which leaves exactly two parts), GPT-2's
pre-tokenization regex, ``<|endoftext|>`` = 50256.

The file is also stored under the name tiktoken expects in ``--tiktoken-cache-dir`` (default:
``tiktoken_cache`` next to ``--out``), so with ``TIKTOKEN_CACHE_DIR`` pointing there
``tiktoken.get_encoding("r50k_base")`` reads it offline. ``--verify`` compares ids with tiktoken
on a built-in set of varied texts and exits 1 on any difference.

    python scripts/gpt2_tokenizer_from_whisper.py --out build/gpt2/tokenizer.json --verify
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from corpus_assets.domain.tokens.tokenizer import gpt2_bytes_to_unicode

WHISPER_VERSION = "20250625"
ASSET = "whisper/assets/gpt2.tiktoken"
R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"  # tiktoken_ext/openai_public.py
ENDOFTEXT = "<|endoftext|>"
ENDOFTEXT_ID = 50256
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

SAMPLE_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "They'll say we'd've done it; you're sure I'm right? She's here, isn't she?",
    "HELLO World!!! 1234567890 3.14159 -42 1e-9 0xDEADBEEF 2024-06-01T12:00:00Z",
    'def fib(n: int) -> int:\n    """Return n-th Fibonacci."""\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n',
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n// done\r\n",
    '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}',
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "Ünïcödé: café naïve résumé façade — “quotes” ‘single’ … ½ ° ±",
    "日本語のテキストとひらがな、カタカナ。中文文本测试。한국어 텍스트입니다.",
    "Русский текст, ελληνικά, עברית, العربية, हिन्दी, ไทย",
    "Emoji: 😀😃😄 👩‍👩‍👧‍👦 🇺🇸 🏳️‍🌈 ❤️ 👍🏽",
    "   leading spaces and trailing spaces   ",
    "tabs\t\tand\nnewlines\n\n\n  mixed \t \n whitespace      runs",
    "\n\n\n",
    " ",
    "",
    "a" * 300 + " " + "ab" * 150,
    "!!!???...,,,;;;:::---___===+++***&&&^^^%%%$$$###@@@",
    "Mixed123Numbers456and7letters 8 9 10 11",
    "URL: https://example.com/path?q=1&r=two#frag and email someone@example.org",
    f"Document one.{ENDOFTEXT}Document two.",
    "\u200b zero width \u00a0 nbsp \u2028 line sep \x00 nul \x7f del",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 ∀x∈ℝ: x² ≥ 0",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE",
]


def read_tiktoken_ranks(data: bytes) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _bpe(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return parts
        i = best[1]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]


def tiktoken_to_tokenizer_json(data: bytes) -> str:
    """Convert tiktoken BPE ranks (file contents) to a HuggingFace tokenizer.json string."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    ranks = read_tiktoken_ranks(data)
    b2u = gpt2_bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)  # noqa: E731
    vocab = {enc(tok): rank for tok, rank in ranks.items()}
    if len(vocab) != len(ranks) or sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError("tiktoken ranks are not a dense 0..n-1 range")
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) == 1:
            continue
        parts = _bpe(ranks, tok, rank)
        if len(parts) != 2:
            raise ValueError(f"token {tok!r} (rank {rank}) does not split into two lower-ranked tokens: {parts}")
        merges.append((enc(parts[0]), enc(parts[1])))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    # ByteLevel(use_regex=True) applies exactly GPT2_PATTERN before the byte-to-unicode mapping.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(ENDOFTEXT, special=True, normalized=False)])
    if tok.token_to_id(ENDOFTEXT) != ENDOFTEXT_ID:
        raise ValueError(f"{ENDOFTEXT} got id {tok.token_to_id(ENDOFTEXT)}, expected {ENDOFTEXT_ID}")
    return tok.to_str(pretty=False)


def _from_installed() -> bytes | None:
    import importlib.util

    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / "assets" / "gpt2.tiktoken"
        if p.is_file():
            return p.read_bytes()
    return None


def _from_pip_download() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               f"openai-whisper=={WHISPER_VERSION}", "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"pip download of openai-whisper failed:\n{proc.stderr[-2000:]}")
        archives = list(Path(tmp).glob("openai_whisper-*.tar.gz")) + list(Path(tmp).glob("openai-whisper-*.tar.gz"))
        if not archives:
            raise SystemExit(f"pip download produced no source archive in {tmp}: {os.listdir(tmp)}")
        with tarfile.open(archives[0]) as tar:
            for member in tar.getmembers():
                if member.name.endswith("/" + ASSET):
                    return tar.extractfile(member).read()
        raise SystemExit(f"{archives[0].name} has no {ASSET}")


def obtain_gpt2_tiktoken(explicit: Path | None) -> tuple[bytes, str]:
    if explicit is not None:
        data, where = explicit.read_bytes(), str(explicit)
    elif (data := _from_installed()) is not None:
        where = "installed whisper package"
    else:
        data, where = _from_pip_download(), f"pip download openai-whisper=={WHISPER_VERSION} (sdist)"
    digest = hashlib.sha256(data).hexdigest()
    if digest != R50K_SHA256:
        raise SystemExit(f"gpt2.tiktoken from {where} has sha256 {digest}, expected r50k_base's {R50K_SHA256}")
    return data, where


def tiktoken_cache_name() -> str:
    """tiktoken.load.read_file_cached stores a blob under sha1(url)."""
    return hashlib.sha1(R50K_URL.encode()).hexdigest()


def compare_with_tiktoken(tokenizer_json: str, cache_dir: Path, texts=SAMPLE_TEXTS) -> tuple[int, int, list[str]]:
    """(texts compared, tokens compared, mismatch descriptions). Never downloads: refuses to run
    unless the r50k_base blob is already in ``cache_dir``."""
    if not (cache_dir / tiktoken_cache_name()).is_file():
        raise FileNotFoundError(f"{cache_dir / tiktoken_cache_name()} missing; tiktoken would download it")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
    import tiktoken
    from tokenizers import Tokenizer

    ref = tiktoken.get_encoding("r50k_base")
    hf = Tokenizer.from_str(tokenizer_json)
    n_tokens, problems = 0, []
    for text in texts:
        want = ref.encode(text, allowed_special="all")
        got = hf.encode(text, add_special_tokens=False).ids
        n_tokens += len(want)
        if got != want:
            problems.append(f"{text[:40]!r}: tiktoken {want[:12]}... hf {got[:12]}...")
        elif hf.decode(got, skip_special_tokens=False) != text:
            problems.append(f"{text[:40]!r}: decode does not round-trip")
    return len(texts), n_tokens, problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="where to write tokenizer.json")
    ap.add_argument("--tiktoken-file", type=Path, help="an existing gpt2.tiktoken / r50k_base.tiktoken")
    ap.add_argument("--tiktoken-cache-dir", type=Path, help="default: <out dir>/tiktoken_cache")
    ap.add_argument("--verify", action="store_true", help="compare ids with tiktoken r50k_base (offline)")
    ap.add_argument("--extra-texts", type=Path, help="with --verify: a UTF-8 file, one more test text per line")
    args = ap.parse_args(argv)

    data, where = obtain_gpt2_tiktoken(args.tiktoken_file)
    print(f"gpt2.tiktoken from {where} (sha256 {R50K_SHA256[:12]}… = r50k_base)")
    text = tiktoken_to_tokenizer_json(data)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(text):,} chars)")
    cache_dir = args.tiktoken_cache_dir or args.out.parent / "tiktoken_cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache_file = cache_dir / tiktoken_cache_name()
    cache_file.write_bytes(data)
    print(f"tiktoken cache: TIKTOKEN_CACHE_DIR={cache_dir} ({cache_file.name})")
    if args.verify:
        texts = list(SAMPLE_TEXTS)
        if args.extra_texts:
            texts += args.extra_texts.read_text(encoding="utf-8").splitlines()
        n_texts, n_tokens, problems = compare_with_tiktoken(text, cache_dir, texts)
        for p in problems:
            print("MISMATCH", p)
        print(f"verify: {n_texts - len(problems)}/{n_texts} texts identical, {n_tokens:,} tiktoken tokens")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
