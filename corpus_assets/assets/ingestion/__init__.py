"""ingestion: raw_snapshot and canonical_records (logic: corpus_assets/domain/ingest, corpus_assets/domain/canonical)."""
