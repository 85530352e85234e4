"""MinHash signatures per snapshot, exact and near-duplicate clusters per release (LSH, Algorithm 18.1), leakage groups."""
