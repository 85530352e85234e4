"""reports: one asset per dbt_like_sql/*.sql model (logic: corpus_assets/domain/reports)."""
