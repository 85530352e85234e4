"""The one decision record: its rows agree with themselves (an action implies its outcome), refuse
what they cannot hold, and the packing stage's rows say what happened to every sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from corpus_assets.domain.layers.decisions import (
    DECISIONS_SCHEMA,
    check_decisions,
    decision,
    decisions_from_columns,
    decisions_table,
    outcome_counts,
)
from corpus_assets.domain.pack.packing import PackingPolicy
from corpus_assets.domain.pack.shards_layer import packing_decisions
from corpus_assets.domain.pack.view_spool import SplitViews


def test_a_row_takes_its_outcome_from_its_action_and_refuses_unknown_fields():
    row = decision(stage="pii", action="modify", reason="pii.redacted", record_id="s:1", chars_in=10, chars_out=8)
    assert (row["outcome"], row["action"], row["tokens_in"]) == ("accepted", "modify", None)
    assert set(row) == set(DECISIONS_SCHEMA.names)
    assert decision(stage="dedup", action="reject", reason="dedup.near_duplicate")["outcome"] == "rejected"
    assert decision(stage="canonicalize", action="delete", reason="deletion.tombstoned")["outcome"] == "deleted"
    with pytest.raises(ValueError, match="action 'drop'"):
        decision(stage="x", action="drop")
    with pytest.raises(ValueError, match="unknown fields"):
        decision(stage="x", action="accept", pii_counts_json="{}")


def test_column_built_tables_match_row_built_ones():
    rows = [decision(stage="splits", action="accept", record_id="a", split="train", policy_version="p"),
            decision(stage="splits", action="quarantine", reason="splits.group_conflict", record_id="b", policy_version="p")]
    by_columns = decisions_from_columns(2, stage="splits", action=["accept", "quarantine"], reason=["ok", "splits.group_conflict"],
                                        record_id=pa.chunked_array([["a"], ["b"]]), split=["train", None], policy_version="p",
                                        detail=["", ""])
    assert by_columns.equals(decisions_table(rows))
    assert outcome_counts(by_columns) == {"accepted": 1, "quarantined": 1}
    by_arrow_action = decisions_from_columns(2, stage="splits", action=pa.chunked_array([["accept"], ["quarantine"]]),
                                             reason=pa.array(["ok", "splits.group_conflict"]), record_id=["a", "b"],
                                             split=["train", None], policy_version="p", detail="")
    assert by_arrow_action.equals(decisions_table(rows))
    with pytest.raises(ValueError, match=r"unknown actions \['keep'\]"):
        decisions_from_columns(2, stage="s", action=pa.array(["accept", "keep"]))
    with pytest.raises(ValueError, match="outcome follows"):
        decisions_from_columns(1, stage="s", action="accept", outcome="rejected")
    with pytest.raises(ValueError, match="unknown actions"):
        decisions_from_columns(1, stage="s", action=["keep"])
    with pytest.raises(ValueError, match="column record_id has 2 rows, expected 3"):
        decisions_from_columns(3, stage="s", action="accept", record_id=["a", "b"])


def test_check_decisions_finds_disagreeing_rows_and_missing_inputs():
    t = decisions_table([decision(stage="s", action="accept", record_id="a")])
    assert check_decisions(t, expected_in=1) == []
    bad = t.set_column(t.schema.get_field_index("outcome"), "outcome", pa.array(["rejected"]))
    assert "do not agree" in check_decisions(bad)[0]
    assert check_decisions(t, expected_in=2) == ["1 decisions for 2 inputs"]


def _views(tmp_path: Path, lengths: list[int]) -> SplitViews:
    views = SplitViews(tmp_path / "v")
    n = np.asarray(lengths, np.int64)
    batch = pa.record_batch({
        "record_id": [f"r{i}" for i in range(len(lengths))], "variant": pa.nulls(len(lengths), pa.string()),
        "source_id": ["src"] * len(lengths),
        "n_tokens": pa.array(n, pa.int32()),
        "input_ids": pa.array([[7] * k for k in lengths], pa.list_(pa.int32())),
        "loss_mask": pa.array([[1] * k for k in lengths], pa.list_(pa.uint8())),
        "offsets": pa.array([[0, 1] * k for k in lengths], pa.list_(pa.int32())),
    })
    views._append(batch)
    views._close()
    return views


@pytest.mark.parametrize("overlength,outcome,reason,kept", [
    ("quarantine", "quarantined", "packing.too_long", 0),
    ("truncate", "accepted", "packing.truncated", 8),
    ("split", "accepted", "packing.split", 20),
])  # fmt: skip
def test_every_sample_gets_the_packing_decision_of_what_reached_the_blocks(tmp_path, overlength, outcome, reason, kept):
    views = _views(tmp_path, [5, 20, 0, 3, 4])
    rows = np.array([0, 1, 2, 3, 4, 0], np.int64)  # r0 drawn twice: two samples
    policy = PackingPolicy(seq_len=8, mode="atomic", overlength=overlength, tail="drop")
    # placed tokens as the packer reports them: the last sample (r0 again) fell in a dropped tail block,
    # r4 half of it (as if a stream had cut it)
    placed = np.array([5, kept, 0, 3, 2, 0], np.int64)
    t = packing_decisions(views, rows, placed, policy, "train")
    got = [(r["record_id"], r["item_index"], r["outcome"], r["action"], r["reason"], r["tokens_in"], r["tokens_out"])
           for r in t.to_pylist()]
    assert got == [
        ("r0", 0, "accepted", "accept", "ok", 5, 5),
        ("r1", 1, outcome, "quarantine" if outcome == "quarantined" else "modify", reason, 20, kept),
        ("r2", 2, "rejected", "reject", "packing.empty_sample", 0, 0),
        ("r3", 3, "accepted", "accept", "ok", 3, 3),
        ("r4", 4, "accepted", "modify", "packing.tail_dropped", 4, 2),
        ("r0", 5, "rejected", "reject", "packing.tail_dropped", 5, 0),
    ]
    assert check_decisions(t, expected_in=len(rows)) == []
    assert set(t.column("split").to_pylist()) == {"train"} and set(t.column("source_id").to_pylist()) == {"src"}
