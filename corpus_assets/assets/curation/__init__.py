"""curation: eval_registry and curated_records (logic: corpus_assets/domain/curate)."""
