"""Cross-cutting pieces every layer uses: digests, keys and paths, settings, config files, reason codes, progress lines, fault injection."""
