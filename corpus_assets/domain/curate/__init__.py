"""Curation: quality filters, decontamination against the eval registry, PII redaction -> the curated_records layer."""
