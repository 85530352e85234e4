"""Sources and capture: sources.yaml, raw items, the incremental crawler, file readers, recipe sources -> the raw_snapshot layer."""
