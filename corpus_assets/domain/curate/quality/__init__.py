"""Rule-based quality filters (sanity, Gopher quality and repetition, C4, FineWeb, preference pairs)."""
