"""Helpers that turn counts into the metadata a user reads in the Dagster UI."""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import dagster as dg


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence], limit: int = 50) -> str:
    rows = list(rows)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows[:limit]:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |")
    if len(rows) > limit:
        lines.append(f"\n_{len(rows) - limit} more rows not shown_")
    return "\n".join(lines)


def counts_table(counts: Mapping[str, int], key_header: str) -> str:
    total = sum(counts.values()) or 1
    return markdown_table(
        [key_header, "count", "share"],
        [(k, v, f"{v / total:.1%}") for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))],
    )


def version_metadata(version) -> dict:
    return {
        "version": dg.MetadataValue.text(version.version),
        "content_digest": dg.MetadataValue.text(version.content_digest),
        "path": dg.MetadataValue.path(str(version.root)),
    }
