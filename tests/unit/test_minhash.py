"""MinHash signatures (issue 4): datasketch bit-compatibility, declared short/empty paths, policy."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest
from xxhash import xxh3_64_intdigest

from corpus_assets.domain.dedup import minhash as mh
from corpus_assets.domain.core.hashing import dedup_normal_form
from corpus_assets.domain.dedup.minhash import (
    MinHashPolicy,
    ShinglePolicy,
    datasketch_hashfunc,
    empty_rows,
    exact_jaccard,
    hash_shingles,
    minhash_policy_version,
    shingle_set,
    signatures,
)

datasketch = pytest.importorskip("datasketch")
from datasketch import LeanMinHash, MinHash, MinHashLSH  # noqa: E402
from datasketch.hashfunc import sha1_hash32  # noqa: E402

_WORDS = (
    "the a of to and in is that for it as with was on be by this are or from at which an have not "
    "package install debian system configuration file server network user kernel module service "
    "daemon apt dpkg repository mirror security update release stable testing unstable backports "
    "größe naïve café 東京 データ 数据 Ελληνικά русский"
).split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _corpus() -> list[str]:
    rng = random.Random(4)
    texts = [_text(rng, rng.randint(5, 400)) for _ in range(30)]
    # real-ish: messy whitespace, tabs, Unicode spaces, code (not whitespace-folded), normal forms
    texts += [
        "  Leading and trailing\tspaces\n\nand  runs of   whitespace here  ",
        "no\u00a0break\u2003em\u3000ideographic\u2028line sep and\u0085nel words here",
        "def f(x):\n    return x + 1\n\nclass A:\n    pass\n",
        dedup_normal_form("The  Debian   Handbook\nChapter 1. The Debian Project", "prose"),
        "a" * 300 + " " + "b" * 20 + " c d e",  # shingles longer than 240 bytes (library path)
        "x\x1fy z w v u t",  # a C0 control (whitespace for str.split)
        "", "   ", "one", "one two", "one two three", "one two three four",
    ]
    return texts


@pytest.fixture
def kernel_path():
    """Select the signature path ("numba" kernel or "numpy"); skips "numba" without numba."""

    def select(path: str) -> None:
        if path == "numba" and mh._numba is None:
            pytest.skip("numba not installed")
        mh.use_numba(path == "numba")
        assert (mh.numba_kernel() is not None) == (path == "numba")

    yield select
    mh.use_numba(True)


@pytest.mark.parametrize(
    "policy",
    [
        MinHashPolicy(),
        MinHashPolicy(num_perm=64, seed=7),
        MinHashPolicy(num_perm=256, seed=123456),
        MinHashPolicy(hash_function="sha1_32", num_perm=32, seed=3),
        MinHashPolicy(scheme="legacy", num_perm=64, seed=1),
        MinHashPolicy(scheme="legacy", hash_function="sha1_32", num_perm=16, seed=42),
        MinHashPolicy(shingles=ShinglePolicy(unit="char", size=5)),
        MinHashPolicy(shingles=ShinglePolicy(unit="word", size=1), num_perm=16),
        MinHashPolicy(shingles=ShinglePolicy(unit="word", size=3), num_perm=16, hash_function="sha1_32"),
    ],
    ids=lambda p: f"{p.shingles.unit}{p.shingles.size}-{p.hash_function}-{p.scheme}-{p.num_perm}-{p.seed}",
)
@pytest.mark.parametrize("path", ["numba", "numpy"])
def test_bit_identical_to_datasketch(policy, path, kernel_path):
    kernel_path(path)
    texts = _corpus()
    sigs = signatures(texts, policy)
    assert sigs.shape == (len(texts), policy.num_perm)
    for text, row in zip(texts, sigs):
        m = MinHash(
            num_perm=policy.num_perm,
            seed=policy.seed,
            hashfunc=datasketch_hashfunc(policy.hash_function),
            scheme=policy.scheme,
        )
        m.update_batch(shingle_set(text, policy.shingles))
        assert row.dtype == m.hashvalues.dtype
        assert np.array_equal(row, m.hashvalues), text[:60]
        assert np.array_equal(row, m.digest())


def test_permutations_match_datasketch():
    for scheme in ("affine32", "legacy"):
        for num_perm, seed in ((128, 1), (7, 99)):
            a, b = mh.permutations(num_perm, seed, scheme)
            ref = MinHash(num_perm=num_perm, seed=seed, scheme=scheme).permutations
            assert np.array_equal(a, ref[0]) and np.array_equal(b, ref[1])


def test_sha1_32_is_datasketch_default_and_xxh3_fold():
    rng = random.Random(1)
    blobs = [bytes(rng.getrandbits(8) for _ in range(n)) for n in list(range(0, 260)) + [1000, 5000]]
    assert hash_shingles(blobs, "sha1_32").tolist() == [sha1_hash32(b) for b in blobs]
    assert hash_shingles(blobs, "xxh3_64_low32").tolist() == [xxh3_64_intdigest(b) & 0xFFFFFFFF for b in blobs]
    assert hash_shingles(blobs, "xxh3_64_low32").dtype == np.uint64
    assert datasketch_hashfunc("sha1_32")(b"abc") == sha1_hash32(b"abc")
    with pytest.raises(ValueError):
        datasketch_hashfunc("md5")


def test_vectorized_xxh3_equals_library_on_every_length():
    rng = random.Random(2)
    blobs = [bytes(rng.getrandbits(8) for _ in range(n)) for n in range(0, 300) for _ in range(3)]
    lens = np.array([len(b) for b in blobs])
    ends = np.cumsum(lens)
    got = mh._xxh3_spans(b"".join(blobs), ends - lens, ends)
    assert got.tolist() == [xxh3_64_intdigest(b) for b in blobs]


def test_lean_minhash_and_lsh_accept_our_signatures():
    policy = MinHashPolicy()
    base = _corpus()[5]
    near = base.replace(base.split()[3], "mirror", 1)  # one word changed
    texts = [base, near, _corpus()[9], "completely different words about nothing in particular today"]
    sigs = signatures(texts, policy)
    lsh = MinHashLSH(threshold=0.5, num_perm=policy.num_perm)
    for i, row in enumerate(sigs):
        m = MinHash(num_perm=policy.num_perm, seed=policy.seed, hashvalues=row, scheme=policy.scheme)
        lean = LeanMinHash(m)
        assert np.array_equal(LeanMinHash.deserialize(_serialize(lean)).hashvalues, row)
        lsh.insert(f"d{i}", lean)
    q = MinHash(num_perm=policy.num_perm, seed=policy.seed, hashvalues=sigs[1], scheme=policy.scheme)
    assert {"d0", "d1"} <= set(lsh.query(q))
    assert "d3" not in lsh.query(q)


def _serialize(lean) -> bytearray:
    buf = bytearray(lean.bytesize())
    lean.serialize(buf)
    return buf


def test_short_and_empty_texts_declared_paths():
    word = ShinglePolicy()
    for text, expected in [
        ("one", [b"one"]),
        ("one two", [b"one two"]),
        ("one  two\tthree\nfour", [b"one two three four"]),
        ("one two three four five", [b"one two three four five"]),
        ("one two three four five six", [b"one two three four five", b"two three four five six"]),
        ("a b a b a b a", [b"a b a b a", b"b a b a b"]),  # a set: repeats counted once
    ]:
        assert shingle_set(text, word) == expected, text
    for empty in ("", "   ", "\n\t\u3000"):
        assert shingle_set(empty, word) == []
    assert shingle_set("", ShinglePolicy(unit="char")) == []
    policy = MinHashPolicy()
    sigs = signatures(["", "   ", "one", "one two three four", "one two three four five six"], policy)
    assert empty_rows(sigs, policy).tolist() == [True, True, False, False, False]
    assert (sigs[0] == np.iinfo(np.uint32).max).all()
    assert exact_jaccard(np.array([], np.uint64), np.array([], np.uint64)) == 0.0  # declared, not 0/0
    assert exact_jaccard(np.array([1], np.uint64), np.array([], np.uint64)) == 0.0
    # an empty text matches datasketch's empty sketch
    assert np.array_equal(sigs[0], MinHash(num_perm=128, seed=1).hashvalues)


def test_char_shingles():
    cs = ShinglePolicy(unit="char", size=3)
    assert shingle_set("abcd", cs) == [b"abc", b"bcd"]
    assert shingle_set("ab", cs) == [b"ab"]  # short path: the whole text
    assert shingle_set("aaaa", cs) == [b"aaa"]
    assert shingle_set("é東ab", cs) == ["é東a".encode(), "東ab".encode()]  # characters, not bytes
    assert shingle_set("a b", cs) == [b"a b"]  # the text as given, whitespace included
    policy = MinHashPolicy(shingles=cs, num_perm=32)
    sigs = signatures(["é東ab", "", "ab", "é東ab"], policy)
    assert np.array_equal(sigs[0], sigs[3]) and empty_rows(sigs, policy).tolist() == [False, True, False, False]


def test_policy_version_changes_with_every_field():
    base = MinHashPolicy()
    variants = [
        base,
        MinHashPolicy(shingles=ShinglePolicy(unit="char")),
        MinHashPolicy(shingles=ShinglePolicy(size=4)),
        MinHashPolicy(num_perm=64),
        MinHashPolicy(seed=2),
        MinHashPolicy(hash_function="sha1_32"),
        MinHashPolicy(scheme="legacy"),
    ]
    versions = [minhash_policy_version(p) for p in variants]
    assert len(set(versions)) == len(variants)
    assert minhash_policy_version(MinHashPolicy()) == versions[0]
    assert versions[0].startswith(mh.MINHASH_CODE_VERSION + "+")
    with pytest.raises(ValueError):
        MinHashPolicy(num_perm=128, extra_field=1)
    with pytest.raises(ValueError):
        ShinglePolicy(size=0)
    with pytest.raises(ValueError):
        MinHashPolicy(hash_function="sha256")


def test_jaccard_estimate_close_to_exact_on_near_duplicates():
    rng = random.Random(9)
    words = [f"w{rng.randint(0, 5000)}" for _ in range(600)]
    a = " ".join(words)
    edited = list(words)
    for i in rng.sample(range(600), 15):
        edited[i] = "CHANGED"
    b = " ".join(edited)
    policy = MinHashPolicy(num_perm=256)
    ha = hash_shingles(shingle_set(a, policy.shingles), policy.hash_function)
    hb = hash_shingles(shingle_set(b, policy.shingles), policy.hash_function)
    exact = exact_jaccard(ha, hb)
    sa, sb = signatures([a, b], policy)
    est = float(np.mean(sa == sb))
    assert 0.6 < exact < 0.95
    assert abs(est - exact) < 0.08  # ~2.7 standard deviations at m=256
    assert exact_jaccard(ha, ha) == 1.0


def test_signature_independent_of_batch_composition():
    texts = _corpus()
    policy = MinHashPolicy(num_perm=64)
    together = signatures(texts, policy)
    alone = np.vstack([signatures([t], policy) for t in texts])
    assert np.array_equal(together, alone)
    tiny_batches = signatures(texts, policy, batch_bytes=50)
    assert np.array_equal(together, tiny_batches)
    order = list(range(len(texts)))
    random.Random(3).shuffle(order)
    shuffled = signatures([texts[i] for i in order], policy)
    assert np.array_equal(shuffled, together[order])
    # the hashing chunk size does not matter either
    old = mh._CHUNK
    try:
        mh._CHUNK = 7
        assert np.array_equal(signatures(texts, policy), together)
    finally:
        mh._CHUNK = old


def test_unicode_whitespace_detection_is_complete():
    spaces = [chr(i) for i in range(sys.maxunicode + 1) if chr(i).isspace() and chr(i) != " "]
    for ch in spaces:
        text = f"alpha{ch}beta gamma"
        assert shingle_set(text, ShinglePolicy(size=2)) == [b"alpha beta", b"beta gamma"], hex(ord(ch))
        # and the vectorized batch path agrees with the one-text path
        sig = signatures(["x y", text, "z"], MinHashPolicy(num_perm=8, shingles=ShinglePolicy(size=2)))
        assert np.array_equal(sig[1], signatures(["alpha beta gamma"], MinHashPolicy(num_perm=8, shingles=ShinglePolicy(size=2)))[0])


@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
@pytest.mark.parametrize("fn", ["xxh3_64_low32", "sha1_32"])
def test_numba_kernel_equals_numpy_path_on_every_span_length(scheme, fn):
    """The compiled kernel against the numpy hash + permutation path, span by span: every length
    0..300 (0 and > 240 take the library's XXH3), random bytes, one document per span and also
    several spans per document, unaligned starts."""
    pytest.importorskip("numba")
    kernel = mh.numba_kernel()
    assert kernel is not None
    rng = random.Random(5)
    blobs = [bytes(rng.getrandbits(8) for _ in range(n)) for n in range(0, 301) for _ in range(2)]
    lens = np.array([len(b) for b in blobs], dtype=np.int64)
    ends = np.cumsum(lens) + 3  # unaligned start of the first span
    starts = ends - lens
    buf = b"xyz" + b"".join(blobs)
    policy = MinHashPolicy(num_perm=32, seed=11, scheme=scheme, hash_function=fn)
    hv = mh._hash_spans(buf, starts, ends, fn)
    assert hv.tolist() == [datasketch_hashfunc(fn)(b) for b in blobs]
    for doc in (np.arange(len(blobs), dtype=np.int64), np.arange(len(blobs), dtype=np.int64) // 7):
        ndoc = int(doc[-1]) + 1
        want = np.full((ndoc, 32), mh._empty_value(policy), dtype=mh.signature_dtype(policy))
        got = want.copy()
        mh._min_hash_rows(hv, doc, want, policy)
        mh._min_hash_rows_numba(kernel, buf, starts, ends, doc, got, policy)
        assert np.array_equal(got, want)
    # the last pass grouped 7 spans per document: those rows equal datasketch's
    for d in (0, 20, 42, ndoc - 1):
        m = MinHash(num_perm=32, seed=11, hashfunc=datasketch_hashfunc(fn), scheme=scheme)
        m.update_batch(blobs[7 * d : 7 * d + 7])
        assert np.array_equal(got[d], m.hashvalues)


def test_numba_and_numpy_paths_agree_on_signatures(kernel_path):
    texts = _corpus() * 3 + ["w" * 500 + " short words after a very long token here"]
    for policy in (MinHashPolicy(), MinHashPolicy(scheme="legacy", num_perm=64),
                   MinHashPolicy(shingles=ShinglePolicy(unit="char", size=9), num_perm=16)):
        kernel_path("numba")
        fast = signatures(texts, policy, batch_bytes=3000)
        kernel_path("numpy")
        slow = signatures(texts, policy, batch_bytes=3000)
        assert np.array_equal(fast, slow)


def test_numpy_fallback_when_numba_is_missing(monkeypatch):
    texts = _corpus()
    want = signatures(texts, MinHashPolicy())
    monkeypatch.setattr(mh, "_numba", None)  # as if `import numba` had failed
    assert mh.numba_kernel() is None
    assert np.array_equal(signatures(texts, MinHashPolicy()), want)
