"""dedup: minhash_signatures and dedup_clusters (logic: corpus_assets/domain/dedup)."""
