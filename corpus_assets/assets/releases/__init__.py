"""releases: release_manifest (logic: corpus_assets/domain/release)."""
