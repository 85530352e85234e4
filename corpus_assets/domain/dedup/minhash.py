"""MinHash signatures for near-duplicate detection, datasketch-compatible, vectorized.

Shingles are a *set* of ``size`` words (or characters) of the text as the caller wants it
compared (for dedup: ``hashing.dedup_normal_form``); a text shorter than ``size`` gives one
shingle, an empty text the empty set, whose "empty" signature is never an LSH candidate
(``empty_rows``). For the same shingles, ``num_perm``, ``seed``, ``scheme`` and hash function the
values equal datasketch's ``MinHash`` exactly. A batch is one UTF-8 buffer processed by numpy
(or one ``numba`` kernel when it imports); a text's signature does not depend on its batch.

Shingles, hash functions, datasketch compatibility: docs/dedup.md#minhash-signatures
"""

from __future__ import annotations

import hashlib
import struct
from typing import Callable, Literal, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from xxhash import xxh3_64_intdigest

from corpus_assets.domain.core.hashing import canonical_digest

MINHASH_CODE_VERSION = "minhash-1"

HashFunctionName = Literal["xxh3_64_low32", "sha1_32"]
SchemeName = Literal["affine32", "legacy"]


class ShinglePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    unit: Literal["word", "char"] = "word"
    size: int = Field(default=5, ge=1)


class MinHashPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    shingles: ShinglePolicy = ShinglePolicy()
    num_perm: int = Field(default=128, ge=1)
    seed: int = Field(default=1, ge=0, lt=2**32)
    hash_function: HashFunctionName = "xxh3_64_low32"
    # datasketch's permutation scheme the values reproduce; "affine32" is datasketch>=2.0's default
    scheme: SchemeName = "affine32"


def minhash_policy_version(policy: Optional[MinHashPolicy] = None) -> str:
    """Digest of everything that decides the signature values: code version and every policy field."""
    policy = policy or MinHashPolicy()
    spec = {"code_version": MINHASH_CODE_VERSION, "policy": policy.model_dump(mode="json")}
    return f"{MINHASH_CODE_VERSION}+{canonical_digest(spec)[:16]}"


# ---------------------------------------------------------------------------------------------
# hash functions, as datasketch receives them


def _xxh3_64_low32(b: bytes) -> int:
    return xxh3_64_intdigest(b) & 0xFFFFFFFF


def _sha1_32(b: bytes) -> int:  # == datasketch.hashfunc.sha1_hash32
    return struct.unpack("<I", hashlib.sha1(b).digest()[:4])[0]


_HASHFUNCS: dict[str, Callable[[bytes], int]] = {"xxh3_64_low32": _xxh3_64_low32, "sha1_32": _sha1_32}


def datasketch_hashfunc(fn: str) -> Callable[[bytes], int]:
    """The ``hashfunc`` to give ``datasketch.MinHash`` so that it reproduces our values."""
    try:
        return _HASHFUNCS[fn]
    except KeyError:
        raise ValueError(f"unknown hash function {fn!r}; known: {sorted(_HASHFUNCS)}") from None


# ---------------------------------------------------------------------------------------------
# XXH3-64 (seed 0, default secret) vectorized over byte spans of one buffer

_U64 = np.uint64
_M32 = _U64(0xFFFFFFFF)
_PRIME64_1 = _U64(0x9E3779B185EBCA87)
_PRIME64_2 = _U64(0xC2B2AE3D27D4EB4F)
_PRIME64_3 = _U64(0x165667B19E3779F9)
_PRIME_MX1 = _U64(0x165667919E3779F9)
_PRIME_MX2 = _U64(0x9FB21C651E98DF25)
_SECRET = bytes.fromhex(  # the first 136 bytes of XXH3's default secret (all XXH3-64 <= 240 B uses)
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3"
)
_S = [np.uint64(int.from_bytes(_SECRET[i : i + 8], "little")) if i + 8 <= len(_SECRET) else None for i in range(136)]
_XXH3_EMPTY = xxh3_64_intdigest(b"")
_CHUNK = 1 << 16  # spans hashed per numpy pass (keeps the temporaries in cache)


def _mul128_fold64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a_lo = a & _M32
    a_hi = a >> _U64(32)
    b_lo = b & _M32
    b_hi = b >> _U64(32)
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    lo_hi = a_lo * b_hi
    hi_hi = a_hi * b_hi
    cross = (lo_lo >> _U64(32)) + (hi_lo & _M32) + lo_hi
    upper = (hi_lo >> _U64(32)) + (cross >> _U64(32)) + hi_hi
    lower = (cross << _U64(32)) | (lo_lo & _M32)
    return upper ^ lower


def _avalanche(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _U64(37))
    h = h * _PRIME_MX1
    return h ^ (h >> _U64(32))


def _xxh64_avalanche(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _U64(33))
    h = h * _PRIME64_2
    h = h ^ (h >> _U64(29))
    h = h * _PRIME64_3
    return h ^ (h >> _U64(32))


def _rotl(h: np.ndarray, r: int) -> np.ndarray:
    return (h << _U64(r)) | (h >> _U64(64 - r))


class _Reader:
    """Little-endian 8/4-byte reads at arbitrary byte positions of a zero-padded window:
    ``u64[pos]`` is the uint64 starting at byte ``pos`` (one contiguous copy of an unaligned,
    1-byte-strided view), so every read is one ``np.take``."""

    def __init__(self, buf: bytes, lo: int, hi: int):  # the window buf[lo:hi] (+ zero padding)
        raw = buf[lo:hi] + b"\0" * 16
        n = len(raw) - 7
        self.words = np.ascontiguousarray(np.ndarray(shape=(n,), dtype="<u8", buffer=raw, strides=(1,)))
        self.bytes = np.frombuffer(raw, dtype=np.uint8)

    def u64(self, pos: np.ndarray) -> np.ndarray:  # pos relative to the window
        return np.take(self.words, pos)

    def u32(self, pos: np.ndarray) -> np.ndarray:
        return np.take(self.words, pos) & _M32


def _mix16(rd: _Reader, pos: np.ndarray, sec: int) -> np.ndarray:
    return _mul128_fold64(rd.u64(pos) ^ _S[sec], rd.u64(pos + 8) ^ _S[sec + 8])


def _xxh3_spans(buf: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """XXH3-64 (seed 0) of ``buf[s:e]`` for every span, as uint64."""
    out = np.empty(starts.shape[0], dtype=np.uint64)
    starts = starts.astype(np.int64, copy=False)
    lens = (ends - starts).astype(np.int64, copy=False)
    for c0 in range(0, out.shape[0], _CHUNK):
        s = starts[c0 : c0 + _CHUNK]
        ln = lens[c0 : c0 + _CHUNK]
        lo = int(s.min())
        hi = int((s + np.minimum(ln, 241)).max())  # longer spans go to the library
        rd = _Reader(buf, lo, hi)
        _xxh3_chunk(rd, buf, s - lo, ln, out[c0 : c0 + _CHUNK], lo)
    return out


def _xxh3_chunk(rd: _Reader, buf: bytes, s: np.ndarray, ln: np.ndarray, o: np.ndarray, lo: int) -> None:
    """Hash spans (s relative to the reader's window at ``lo`` of ``buf``) into ``o``."""
    # 17..128 bytes: the common case for word shingles
    m = (ln > 16) & (ln <= 128)
    if m.any():
        idx = np.flatnonzero(m)
        p, L = s[idx], ln[idx]
        e = p + L
        acc = L.astype(np.uint64) * _PRIME64_1
        acc += _mix16(rd, p, 0)
        acc += _mix16(rd, e - 16, 16)
        sub = np.flatnonzero(L > 32)
        if sub.size:
            ps, es, Ls = p[sub], e[sub], L[sub]
            add = _mix16(rd, ps + 16, 32) + _mix16(rd, es - 32, 48)
            sub2 = np.flatnonzero(Ls > 64)
            if sub2.size:
                add[sub2] += _mix16(rd, ps[sub2] + 32, 64) + _mix16(rd, es[sub2] - 48, 80)
                sub3 = np.flatnonzero(Ls[sub2] > 96)
                if sub3.size:
                    j = sub2[sub3]
                    add[j] += _mix16(rd, ps[j] + 48, 96) + _mix16(rd, es[j] - 64, 112)
            acc[sub] += add
        o[idx] = _avalanche(acc)
    # 9..16
    m = (ln > 8) & (ln <= 16)
    if m.any():
        idx = np.flatnonzero(m)
        p, L = s[idx], ln[idx]
        in_lo = rd.u64(p) ^ (_S[24] ^ _S[32])
        in_hi = rd.u64(p + L - 8) ^ (_S[40] ^ _S[48])
        acc = L.astype(np.uint64) + in_lo.byteswap() + in_hi + _mul128_fold64(in_lo, in_hi)
        o[idx] = _avalanche(acc)
    # 4..8
    m = (ln >= 4) & (ln <= 8)
    if m.any():
        idx = np.flatnonzero(m)
        p, L = s[idx], ln[idx]
        in1 = rd.u32(p)
        in2 = rd.u32(p + L - 4)
        h = (in2 + (in1 << _U64(32))) ^ (_S[8] ^ _S[16])
        h = h ^ _rotl(h, 49) ^ _rotl(h, 24)
        h = h * _PRIME_MX2
        h = h ^ ((h >> _U64(35)) + L.astype(np.uint64))
        h = h * _PRIME_MX2
        o[idx] = h ^ (h >> _U64(28))
    # 1..3
    m = (ln >= 1) & (ln <= 3)
    if m.any():
        idx = np.flatnonzero(m)
        p, L = s[idx], ln[idx]
        b = rd.bytes
        c1 = b[p].astype(np.uint64)
        c2 = b[p + (L >> 1)].astype(np.uint64)
        c3 = b[p + L - 1].astype(np.uint64)
        combined = (c1 << _U64(16)) | (c2 << _U64(24)) | c3 | (L.astype(np.uint64) << _U64(8))
        bitflip = _U64(int.from_bytes(_SECRET[0:4], "little") ^ int.from_bytes(_SECRET[4:8], "little"))
        o[idx] = _xxh64_avalanche(combined ^ bitflip)
    # 129..240
    m = (ln > 128) & (ln <= 240)
    if m.any():
        idx = np.flatnonzero(m)
        p, L = s[idx], ln[idx]
        acc = L.astype(np.uint64) * _PRIME64_1
        for i in range(8):
            acc += _mix16(rd, p + 16 * i, 16 * i)
        acc = _avalanche(acc)
        acc_end = _mix16(rd, p + L - 16, 136 - 17)
        rounds = L // 16
        for i in range(8, 15):
            j = np.flatnonzero(rounds > i)
            if j.size:
                acc_end[j] += _mix16(rd, p[j] + 16 * i, 16 * (i - 8) + 3)
        o[idx] = _avalanche(acc + acc_end)
    # 0 and > 240: the library itself (rare for shingles)
    m = (ln == 0) | (ln > 240)
    if m.any():
        for k in np.flatnonzero(m).tolist():
            a = lo + int(s[k])
            o[k] = xxh3_64_intdigest(buf[a : a + int(ln[k])])


def _hash_spans(buf: bytes, starts: np.ndarray, ends: np.ndarray, fn: str) -> np.ndarray:
    """The 32-bit hashfunc value of every span ``buf[s:e]``, as uint64 (datasketch's input)."""
    if fn == "xxh3_64_low32":
        return _xxh3_spans(buf, starts, ends) & _M32
    if fn == "sha1_32":
        sha1 = hashlib.sha1
        digests = b"".join([sha1(buf[a:b]).digest()[:4] for a, b in zip(starts.tolist(), ends.tolist())])
        return np.frombuffer(digests, dtype="<u4").astype(np.uint64)
    datasketch_hashfunc(fn)  # raises
    raise AssertionError  # pragma: no cover


def hash_shingles(shingles: list[bytes], fn: str) -> np.ndarray:
    """The value ``datasketch_hashfunc(fn)`` gives each shingle (32-bit values in a uint64 array)."""
    lens = np.fromiter(map(len, shingles), dtype=np.int64, count=len(shingles))
    ends = np.cumsum(lens)
    return _hash_spans(b"".join(shingles), ends - lens, ends, fn)


# ---------------------------------------------------------------------------------------------
# shingles as byte spans of a batch buffer

def _word_form(text: str) -> bytes:
    """UTF-8 of the tokens joined by single spaces (the only whitespace left is separators)."""
    return " ".join(text.split()).encode("utf-8", "surrogatepass")


# bytes that may start whitespace other than a lone separator space: ASCII whitespace (and
# other C0 controls, harmlessly), and the UTF-8 lead bytes of Unicode whitespace (U+0085, U+00A0,
# U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), checked precisely below
_SUSPECT = np.zeros(256, dtype=bool)
_SUSPECT[:32] = True
_SUSPECT[[0xC2, 0xE1, 0xE2, 0xE3]] = True


def _unclean_positions(arr: np.ndarray) -> np.ndarray:
    """Positions in ``arr`` (UTF-8) where a whitespace character other than U+0020 starts
    (plus other C0 controls: conservative, they only send their text to the slow path)."""
    cand = np.flatnonzero(np.take(_SUSPECT, arr))
    if cand.size == 0:
        return cand
    pad = np.concatenate((arr, np.zeros(2, dtype=np.uint8)))
    c0, c1, c2 = pad[cand].astype(np.int32), pad[cand + 1].astype(np.int32), pad[cand + 2].astype(np.int32)
    code = (c0 << 16) | (c1 << 8) | c2
    bad = c0 < 32
    bad |= (c0 == 0xC2) & ((c1 == 0x85) | (c1 == 0xA0))
    bad |= code == 0xE19A80
    bad |= (c0 == 0xE2) & (c1 == 0x80) & (((c2 >= 0x80) & (c2 <= 0x8A)) | (c2 == 0xA8) | (c2 == 0xA9) | (c2 == 0xAF))
    bad |= (code == 0xE2819F) | (code == 0xE38080)
    return cand[bad]


def _word_buffer(texts: Sequence[str]) -> tuple[list[bytes], np.ndarray, bytes, np.ndarray, np.ndarray]:
    """(parts, docs, buf, dstart, sep) for the word unit: ``parts[i]`` is text i's tokens joined
    by single spaces (UTF-8), ``docs`` the texts with a token, ``buf`` their parts joined by one
    space, ``dstart`` their offsets in it, ``sep`` the positions of spaces in it.

    Texts are encoded as given and checked in one vectorized pass; only texts with whitespace
    other than single inner spaces (tabs, newlines, runs, edges, Unicode spaces) are re-formed
    with ``" ".join(text.split())``.
    """
    parts = [t.encode("utf-8", "surrogatepass") for t in texts]
    checked = False
    while True:
        lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        docs = np.flatnonzero(lens > 0)
        if docs.size == 0:
            return parts, docs, b"", np.zeros(0, np.int64), np.zeros(0, np.int64)
        dl = lens[docs]
        buf = b" ".join(parts) if docs.size == len(parts) else b" ".join([parts[i] for i in docs.tolist()])
        dstart = np.zeros(docs.size, dtype=np.int64)
        np.cumsum(dl[:-1] + 1, out=dstart[1:])
        arr = np.frombuffer(buf, dtype=np.uint8)
        sep = np.flatnonzero(arr == 32)
        if checked:
            return parts, docs, buf, dstart, sep
        # a clean part has no leading/trailing space and no two adjacent spaces: with the joins,
        # that is "no two adjacent spaces anywhere and none at either end of buf"
        bad_pos = [_unclean_positions(arr), sep[1:][np.diff(sep) == 1]]
        if sep.size and sep[0] == 0:
            bad_pos.append(sep[:1])
        if sep.size and sep[-1] == len(buf) - 1:
            bad_pos.append(sep[-1:])
        bad = np.concatenate(bad_pos)
        if bad.size == 0:
            return parts, docs, buf, dstart, sep
        # a space pair straddling a join belongs to either neighbour: re-form both
        hit = np.searchsorted(dstart, bad, side="right") - 1
        hit = np.unique(np.concatenate((hit, np.maximum(hit - 1, 0))))
        for i in docs[hit].tolist():
            parts[i] = _word_form(texts[i])
        checked = True


def _spans(texts: Sequence[str], shingles: ShinglePolicy) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """(buffer, starts, ends, doc) of every shingle occurrence of every text, in text order.

    Word unit: the texts' word forms (empty ones left out) are joined by one space into the
    buffer; a shingle is the span from its first token's start to its last token's end, which is
    exactly its tokens joined by one space. Char unit: the texts' UTF-8 bytes are concatenated and
    a character is the span from one character start to the next.
    """
    n = shingles.size
    if shingles.unit == "word":
        _, docs, buf, dstart, sep = _word_buffer(texts)
        if docs.size == 0:
            z = np.zeros(0, dtype=np.int64)
            return b"", z, z, z
        tok_start = np.empty(sep.size + 1, dtype=np.int64)
        tok_start[0] = 0
        np.add(sep, 1, out=tok_start[1:])
        tok_end = np.empty(sep.size + 1, dtype=np.int64)
        tok_end[:-1] = sep
        tok_end[-1] = len(buf)
    else:
        parts = [t.encode("utf-8", "surrogatepass") for t in texts]
        lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        docs = np.flatnonzero(lens > 0)
        if docs.size == 0:
            z = np.zeros(0, dtype=np.int64)
            return b"", z, z, z
        buf = b"".join(parts)
        dstart = np.zeros(docs.size, dtype=np.int64)
        np.cumsum(lens[docs][:-1], out=dstart[1:])
        tok_start = np.flatnonzero((np.frombuffer(buf, dtype=np.uint8) & 0xC0) != 0x80)  # char starts
        tok_end = np.empty_like(tok_start)
        tok_end[:-1] = tok_start[1:]
        tok_end[-1] = len(buf)  # a doc's last character ends where the next doc starts
    first = np.searchsorted(tok_start, dstart)  # index of each doc's first token
    ntok = np.empty_like(first)
    ntok[:-1] = first[1:] - first[:-1]
    ntok[-1] = tok_start.size - first[-1]
    nsh = np.maximum(ntok - (n - 1), 1)  # fewer tokens than n: one shingle, the whole text
    cum = np.zeros(docs.size, dtype=np.int64)
    np.cumsum(nsh[:-1], out=cum[1:])
    total = int(cum[-1] + nsh[-1])
    start_tok = np.arange(total, dtype=np.int64)
    start_tok += np.repeat(first - cum, nsh)
    end_tok = np.minimum(start_tok + (n - 1), np.repeat(first + ntok - 1, nsh))
    ends = tok_end[end_tok]
    return buf, tok_start[start_tok], ends, np.repeat(docs, nsh)


def shingle_set(text: str, shingles: ShinglePolicy) -> list[bytes]:
    """Unique shingles of ``text`` as UTF-8 bytes, in first-occurrence order (see module doc)."""
    buf, starts, ends, _ = _spans([text], shingles)
    return list(dict.fromkeys([buf[a:b] for a, b in zip(starts.tolist(), ends.tolist())]))


# ---------------------------------------------------------------------------------------------
# permutations and signatures

_MERSENNE = np.uint64((1 << 61) - 1)
_MAX32 = np.uint64((1 << 32) - 1)
_PERM_CACHE: dict[tuple[int, int, str], tuple[np.ndarray, np.ndarray]] = {}


def permutations(num_perm: int, seed: int, scheme: str = "affine32") -> tuple[np.ndarray, np.ndarray]:
    """(a, b) exactly as ``datasketch.MinHash(num_perm, seed, scheme=scheme).permutations``."""
    key = (num_perm, seed, scheme)
    if key not in _PERM_CACHE:
        gen = np.random.RandomState(seed)
        if scheme == "legacy":
            ab = np.array(
                [
                    (gen.randint(1, _MERSENNE, dtype=np.uint64), gen.randint(0, _MERSENNE, dtype=np.uint64))
                    for _ in range(num_perm)
                ],
                dtype=np.uint64,
            ).T
            a, b = ab[0].copy(), ab[1].copy()
        elif scheme == "affine32":
            a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
            b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
        else:
            raise ValueError(f"unknown scheme {scheme!r}")
        a.setflags(write=False)
        b.setflags(write=False)
        _PERM_CACHE[key] = (a, b)
    return _PERM_CACHE[key]


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def signature_dtype(policy: MinHashPolicy) -> type:
    return np.uint32 if policy.scheme == "affine32" else np.uint64


def _empty_value(policy: MinHashPolicy):
    return np.uint32(0xFFFFFFFF) if policy.scheme == "affine32" else _MAX32


_BLOCK_CELLS = 1 << 20  # permuted values held at once (4 MiB of uint32), measured best


def _min_hash_rows(hv: np.ndarray, doc: np.ndarray, out: np.ndarray, policy: MinHashPolicy) -> None:
    """out[d] = min over the hashes of doc d of every permuted value (docs sorted, rows of out
    pre-filled with the empty value)."""
    a, b = permutations(policy.num_perm, policy.seed, policy.scheme)
    P = policy.num_perm
    if policy.scheme == "affine32":
        x = _fmix32(hv.astype(np.uint32))
        a_col, b_col = a[:, None], b[:, None]
    else:
        x = hv.astype(np.uint64)
        a_col, b_col = a[:, None], b[:, None]
    R = max(256, _BLOCK_CELLS // P)
    N = x.shape[0]
    buf = np.empty((P, min(R, max(N, 1))), dtype=x.dtype)
    for s in range(0, N, R):
        xe = x[s : s + R]
        de = doc[s : s + R]
        blk = buf[:, : xe.shape[0]]
        np.multiply(a_col, xe[None, :], out=blk)
        np.add(blk, b_col, out=blk)
        if policy.scheme == "legacy":
            np.remainder(blk, _MERSENNE, out=blk)
            np.bitwise_and(blk, _MAX32, out=blk)
        seg = np.flatnonzero(np.concatenate(([True], de[1:] != de[:-1])))
        mins = np.minimum.reduceat(blk, seg, axis=1)  # (P, nseg)
        ids = de[seg]
        out[ids] = np.minimum(out[ids], mins.T)


# ---------------------------------------------------------------------------------------------
# optional compiled kernel (numba): XXH3-64-low32 of every span + permutation + per-document
# minimum in one pass, bit-identical to the numpy path above (tested). Used when numba imports.

try:  # pragma: no cover - exercised when numba is installed
    import numba as _numba
except Exception:  # ImportError, or a numba incompatible with this numpy
    _numba = None

_SEC_AT = np.array([int.from_bytes(_SECRET[i : i + 8], "little") for i in range(129)], dtype=np.uint64)
_BITFLIP_1_3 = np.uint64(int.from_bytes(_SECRET[0:4], "little") ^ int.from_bytes(_SECRET[4:8], "little"))
_BITFLIP_4_8 = np.uint64(int(_S[8]) ^ int(_S[16]))
_BITFLIP_9_16_LO = np.uint64(int(_S[24]) ^ int(_S[32]))
_BITFLIP_9_16_HI = np.uint64(int(_S[40]) ^ int(_S[48]))


if _numba is not None:  # pragma: no branch
    _njit = _numba.njit
    _NB_M32 = np.uint64(0xFFFFFFFF)

    @_njit(inline="always")
    def _nb_fold(a, b):
        a_lo = a & _NB_M32
        a_hi = a >> np.uint64(32)
        b_lo = b & _NB_M32
        b_hi = b >> np.uint64(32)
        lo_lo = a_lo * b_lo
        hi_lo = a_hi * b_lo
        lo_hi = a_lo * b_hi
        hi_hi = a_hi * b_hi
        cross = (lo_lo >> np.uint64(32)) + (hi_lo & _NB_M32) + lo_hi
        upper = (hi_lo >> np.uint64(32)) + (cross >> np.uint64(32)) + hi_hi
        lower = (cross << np.uint64(32)) | (lo_lo & _NB_M32)
        return upper ^ lower

    @_njit(inline="always")
    def _nb_aval(h):
        h = h ^ (h >> np.uint64(37))
        h = h * _PRIME_MX1
        return h ^ (h >> np.uint64(32))

    @_njit(inline="always")
    def _nb_mix16(w, p, s):
        return _nb_fold(w[p] ^ _SEC_AT[s], w[p + 8] ^ _SEC_AT[s + 8])

    @_njit(inline="always")
    def _nb_bswap(x):
        x = ((x & _NB_M32) << np.uint64(32)) | (x >> np.uint64(32))
        m16, m8 = np.uint64(0x0000FFFF0000FFFF), np.uint64(0x00FF00FF00FF00FF)
        x = ((x & m16) << np.uint64(16)) | ((x >> np.uint64(16)) & m16)
        return ((x & m8) << np.uint64(8)) | ((x >> np.uint64(8)) & m8)

    @_njit(inline="always")
    def _nb_xxh3(w, by, p, L):
        """XXH3-64 (seed 0) of by[p:p+L], 1 <= L <= 240 (w: unaligned uint64 view of by)."""
        Lu = np.uint64(L)
        if L > 16:
            if L <= 128:
                acc = Lu * _PRIME64_1
                if L > 32:
                    if L > 64:
                        if L > 96:
                            acc += _nb_mix16(w, p + 48, 96)
                            acc += _nb_mix16(w, p + L - 64, 112)
                        acc += _nb_mix16(w, p + 32, 64)
                        acc += _nb_mix16(w, p + L - 48, 80)
                    acc += _nb_mix16(w, p + 16, 32)
                    acc += _nb_mix16(w, p + L - 32, 48)
                acc += _nb_mix16(w, p, 0)
                acc += _nb_mix16(w, p + L - 16, 16)
                return _nb_aval(acc)
            acc = Lu * _PRIME64_1
            for i in range(8):
                acc += _nb_mix16(w, p + 16 * i, 16 * i)
            acc = _nb_aval(acc)
            acc_end = _nb_mix16(w, p + L - 16, 136 - 17)
            for i in range(8, L // 16):
                acc_end += _nb_mix16(w, p + 16 * i, 16 * (i - 8) + 3)
            return _nb_aval(acc + acc_end)
        if L > 8:
            in_lo = w[p] ^ _BITFLIP_9_16_LO
            in_hi = w[p + L - 8] ^ _BITFLIP_9_16_HI
            return _nb_aval(Lu + _nb_bswap(in_lo) + in_hi + _nb_fold(in_lo, in_hi))
        if L >= 4:
            in1 = w[p] & _NB_M32
            in2 = w[p + L - 4] & _NB_M32
            h = (in2 + (in1 << np.uint64(32))) ^ _BITFLIP_4_8
            h = h ^ ((h << np.uint64(49)) | (h >> np.uint64(15))) ^ ((h << np.uint64(24)) | (h >> np.uint64(40)))
            h = h * _PRIME_MX2
            h = h ^ ((h >> np.uint64(35)) + Lu)
            h = h * _PRIME_MX2
            return h ^ (h >> np.uint64(28))
        c1 = np.uint64(by[p])
        c2 = np.uint64(by[p + (L >> 1)])
        c3 = np.uint64(by[p + L - 1])
        h = ((c1 << np.uint64(16)) | (c2 << np.uint64(24)) | c3 | (Lu << np.uint64(8))) ^ _BITFLIP_1_3
        h = h ^ (h >> np.uint64(33))
        h = h * _PRIME64_2
        h = h ^ (h >> np.uint64(29))
        h = h * _PRIME64_3
        return h ^ (h >> np.uint64(32))

    @_njit(cache=True, nogil=True)
    def _nb_minhash_spans(w, by, starts, ends, doc, given, pre_idx, pre_val, a, b, legacy, out):
        """out[doc[i]] = min(out[doc[i]], permuted hash of span i); the hash is ``given[i]`` when
        ``given`` is non-empty, else XXH3-64-low32 of ``by[starts[i]:ends[i]]`` (spans of length
        0 or > 240 take their XXH3 from ``pre_val``, at the sorted span indices ``pre_idx``)."""
        n = starts.shape[0]
        P = a.shape[0]
        use_given = given.shape[0] > 0
        j = 0
        for i in range(n):
            if use_given:
                h = given[i] & _NB_M32
            else:
                p = starts[i]
                L = ends[i] - p
                if j < pre_idx.shape[0] and pre_idx[j] == i:
                    h = pre_val[j] & _NB_M32
                    j += 1
                else:
                    h = _nb_xxh3(w, by, p, L) & _NB_M32
            row = out[doc[i]]
            if legacy:
                for k in range(P):
                    v = ((np.uint64(a[k]) * h + np.uint64(b[k])) % _MERSENNE) & _NB_M32
                    row[k] = min(row[k], v)
            else:
                x = np.uint32(h)
                x = np.uint32(x ^ (x >> np.uint32(16)))
                x = np.uint32(x * np.uint32(0x85EBCA6B))
                x = np.uint32(x ^ (x >> np.uint32(13)))
                x = np.uint32(x * np.uint32(0xC2B2AE35))
                x = np.uint32(x ^ (x >> np.uint32(16)))
                for k in range(P):
                    row[k] = min(row[k], np.uint32(a[k] * x + b[k]))


_NB_STATE: dict[str, object] = {}


def numba_kernel():
    """The compiled kernel, or None (numba missing, or disabled with ``use_numba(False)``)."""
    if _numba is None or not _NB_STATE.get("enabled", True):
        return None
    return _nb_minhash_spans


def use_numba(enabled: bool) -> None:
    """Switch the numba kernel on/off (off: the numpy path). Results are identical either way."""
    _NB_STATE["enabled"] = bool(enabled)


def _padded_views(buf: bytes) -> tuple[np.ndarray, np.ndarray]:
    raw = np.frombuffer(buf + b"\0" * 16, dtype=np.uint8)
    words = np.ndarray(shape=(raw.shape[0] - 7,), dtype="<u8", buffer=raw, strides=(1,))
    return words, raw


def _min_hash_rows_numba(kernel, buf, starts, ends, doc, out, policy) -> None:
    a, b = permutations(policy.num_perm, policy.seed, policy.scheme)
    words, raw = _padded_views(buf)
    starts = starts.astype(np.int64, copy=False)
    ends = ends.astype(np.int64, copy=False)
    doc = doc.astype(np.int64, copy=False)
    empty_i, empty_v = np.zeros(0, np.int64), np.zeros(0, np.uint64)
    if policy.hash_function == "xxh3_64_low32":
        lens = ends - starts
        pre_idx = np.flatnonzero((lens == 0) | (lens > 240))
        pre_val = np.array([xxh3_64_intdigest(buf[int(starts[k]) : int(ends[k])]) for k in pre_idx.tolist()],
                           dtype=np.uint64)
        given = empty_v
    else:
        given, pre_idx, pre_val = _hash_spans(buf, starts, ends, policy.hash_function), empty_i, empty_v
    kernel(words, raw, starts, ends, doc, given, pre_idx, pre_val, a, b, policy.scheme == "legacy", out)


def signatures(
    texts: Sequence[str], policy: Optional[MinHashPolicy] = None, batch_bytes: int = 512 << 10
) -> np.ndarray:
    """MinHash signatures, shape ``(len(texts), num_perm)``, dtype of the scheme (uint32 for
    ``affine32``, uint64 for ``legacy``), row i == ``datasketch.MinHash(num_perm, seed,
    hashfunc=datasketch_hashfunc(fn), scheme=scheme)`` updated with ``shingle_set(texts[i])``.
    Empty texts get the all-maximum row (see :func:`empty_rows`).

    Texts are processed in batches of about ``batch_bytes`` characters; results do not depend on it
    (512 KiB keeps the batch's temporaries in cache: measured faster and steadier than 8 MiB).
    With numba installed the hashing, permutation and minima run in one compiled pass
    (:func:`numba_kernel`), else in numpy; both give the same values.
    """
    policy = policy or MinHashPolicy()
    out = np.full((len(texts), policy.num_perm), _empty_value(policy), dtype=signature_dtype(policy))
    i = 0
    while i < len(texts):
        j, size = i, 0
        while j < len(texts) and (j == i or size + len(texts[j]) <= batch_bytes):
            size += len(texts[j])
            j += 1
        buf, starts, ends, doc = _spans(texts[i:j], policy.shingles)
        if starts.size:
            kernel = numba_kernel()
            if kernel is not None:
                _min_hash_rows_numba(kernel, buf, starts, ends, doc, out[i:j], policy)
            else:
                hv = _hash_spans(buf, starts, ends, policy.hash_function)
                _min_hash_rows(hv, doc, out[i:j], policy)
        i = j
    return out


def empty_rows(sigs: np.ndarray, policy: Optional[MinHashPolicy] = None) -> np.ndarray:
    """Rows that are the empty sketch (texts without shingles): never LSH candidates."""
    policy = policy or MinHashPolicy()
    return np.all(sigs == _empty_value(policy), axis=1)


def text_shingle_hashes(normal_text: str, policy: MinHashPolicy) -> np.ndarray:
    """The sorted unique shingle hashes of a text in dedup normal form: what real Jaccard compares."""
    return np.unique(hash_shingles(shingle_set(normal_text, policy.shingles), policy.hash_function))


def exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sets of shingle hashes (duplicates ignored).

    Declared: 0.0 when either set is empty (two empty sets included), never 0/0.
    """
    ua, ub = np.unique(np.asarray(a)), np.unique(np.asarray(b))
    if ua.size == 0 or ub.size == 0:
        return 0.0
    inter = np.intersect1d(ua, ub, assume_unique=True).size
    return inter / (ua.size + ub.size - inter)
