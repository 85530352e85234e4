"""Two small release builds that differ in one shard's bytes, shared by the publish tests
(unit/test_publish.py) and the object-store tests (integration/test_object_store.py)."""

FILES_A = {
    "shards/train/train-00000.bin": bytes(range(256)) * 8,
    "shards/train/train-00000.idx": b"MMIDIDX\x00\x00" + b"\x01" * 40,
    "shards/validation/validation-00000.bin": b"v" * 300,
    "reports/stage_counts.json": b'{"accepted": 10}',
}
FILES_B = {**FILES_A, "shards/train/train-00000.bin": bytes(range(256)) * 7}
