"""Raw item -> typed canonical record: decoding, HTML extraction, normalization, language ID, row adapters -> the canonical_records layer."""
