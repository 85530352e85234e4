"""The Dagster assets, one module per layer, grouped as the UI groups them; each calls the pure logic of corpus_assets.domain."""
