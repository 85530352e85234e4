"""pair_memo: the candidate-pair verdicts one build of a release keeps for the next."""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pyarrow as pa
import pytest

from corpus_assets.domain.dedup import pair_memo
from corpus_assets.domain.dedup.pair_memo import key_words, unshared, verdict_table, write_memo


def _keys(n: int, salt: str = "") -> list[str]:
    return [hashlib.sha256(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


def test_key_words_are_the_first_128_bits_of_each_key():
    keys = _keys(50)
    arr = pa.chunked_array([pa.array(keys[:20]), pa.array(keys[20:])]).slice(3)  # chunked, with an offset
    got = key_words(arr)
    want = [[int(k[:16], 16), int(k[16:32], 16)] for k in keys[3:]]
    assert got.dtype == np.uint64 and got.tolist() == want


@pytest.mark.parametrize("bad", ["F" * 64, "x" * 64, "ab" * 16, None])
def test_key_words_refuse_what_is_not_a_dedup_key(bad):
    with pytest.raises(ValueError, match="64 lowercase hex digits"):
        key_words(pa.array(_keys(2) + [bad]))


def test_unshared_marks_every_row_of_a_repeated_key():
    w = key_words(pa.array(_keys(4)))
    keys = np.concatenate([w, w[1:2], w[3:4], w[3:4]])
    assert unshared(keys).tolist() == [True, False, True, False, False, False, False]


def test_the_table_is_the_same_for_any_pair_order_and_lookups_return_its_values(tmp_path):
    keys = key_words(pa.array(_keys(6)))
    i, j = np.array([0, 3, 1, 4, 0]), np.array([1, 2, 5, 0, 1])  # (0,1) twice
    jac = np.array([0.9, 0.25, 0.5, 0.75, 0.9])
    table = verdict_table(keys, i, j, jac)
    perm = np.array([4, 2, 0, 3, 1])
    assert verdict_table(keys, j[perm], i[perm], jac[perm]).equals(table)  # swapped and shuffled
    assert table.num_rows == 4
    # the next build: the same records at other row numbers, plus one new record
    later = np.concatenate([keys[[5, 4, 3, 2, 1, 0]], key_words(pa.array(_keys(1, "new")))])
    memo = pickle.loads(pickle.dumps(write_memo(table, later, tmp_path / "m")))
    assert memo.entries == 4
    hit, got = memo.lookup(np.array([5, 4, 2, 1, 0, 6]), np.array([4, 5, 3, 5, 6, 1]))
    # (5,4) = old (0,1); (4,5) the same pair reversed; (2,3) = old (3,2); (1,5) = old (4,0); 6 is new
    assert hit.tolist() == [True, True, True, True, False, False]
    assert got[:4].tolist() == [0.9, 0.9, 0.25, 0.75] and np.isnan(got[4:]).all()


def test_shared_keys_neither_enter_nor_use_the_memo(tmp_path):
    w = key_words(pa.array(_keys(3)))
    keys = np.concatenate([w, w[2:3]])  # rows 2 and 3: one key, two texts (a forged collision)
    table = verdict_table(keys, np.array([0, 0, 2]), np.array([1, 2, 3]), np.array([0.9, 0.4, 0.1]))
    assert table.num_rows == 1  # only (0, 1)
    memo = write_memo(verdict_table(w, np.array([0, 0]), np.array([1, 2]), np.array([0.9, 0.4])), keys, tmp_path / "m")
    hit, _ = memo.lookup(np.array([0, 0, 1]), np.array([1, 2, 3]))
    assert hit.tolist() == [True, False, False]


def test_entries_whose_lookup_hash_collides_are_dropped(tmp_path, monkeypatch):
    keys = key_words(pa.array(_keys(4)))
    table = verdict_table(keys, np.array([0, 2, 0]), np.array([1, 3, 3]), np.array([0.9, 0.8, 0.7]))
    real = pair_memo._pair_hash

    def colliding(a, b):  # the pairs (0,1) and (2,3) hash alike
        h = real(a, b)
        first = (((a == keys[0]) & (b == keys[1])) | ((a == keys[1]) & (b == keys[0]))).all(axis=1)
        h[first] = real(*pair_memo._ordered(keys[2:3], keys[3:4]))[0]
        return h

    monkeypatch.setattr(pair_memo, "_pair_hash", colliding)
    memo = write_memo(table, keys, tmp_path / "m")
    assert memo.entries == 1
    hit, got = memo.lookup(np.array([0, 2, 0]), np.array([1, 3, 3]))
    assert hit.tolist() == [False, False, True] and got[2] == 0.7
