"""splits_tokens: splits, tokenizer, token_views (logic: corpus_assets/domain/tokens)."""
