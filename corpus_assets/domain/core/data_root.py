"""The sub-folders of a data root, named once.

``$CORPUS_HOME`` (or, with an object-store data root, the bucket prefix and the local cache
beside it) holds ``layers/`` (versioned layers), ``shards/`` (content-addressed shard sets per
release), ``releases/`` (published builds), and, on the local root, ``deletion_requests/`` (the drop
folder) and ``demo_inputs/``. Code asks a ``DataRoot`` for these paths (and for the matching
object-store keys) instead of joining the names by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

__all__ = ["DataRoot", "LAYERS", "SHARDS", "RELEASES", "DELETION_REQUESTS", "DEMO_INPUTS"]

LAYERS = "layers"
SHARDS = "shards"
RELEASES = "releases"
DELETION_REQUESTS = "deletion_requests"
DEMO_INPUTS = "demo_inputs"


@dataclass(frozen=True)
class DataRoot:
    home: Path

    @property
    def layers(self) -> Path:
        return self.home / LAYERS

    @property
    def shards(self) -> Path:
        return self.home / SHARDS

    @property
    def releases(self) -> Path:
        return self.home / RELEASES

    @property
    def deletion_requests(self) -> Path:
        return self.home / DELETION_REQUESTS

    @property
    def demo_inputs(self) -> Path:
        return self.home / DEMO_INPUTS

    def shard_sets(self, release: str) -> Path:
        """Where the shard sets of ``release`` live (one content-addressed directory each)."""
        return self.shards / release

    @staticmethod
    def shard_sets_key(release: str) -> str:
        """The same, as a key relative to the data root (object-store prefix)."""
        return f"{SHARDS}/{release}"

    @staticmethod
    def release_key(release: str, build_id: Optional[str] = None) -> str:
        """``releases/<release>[/<build id>]`` relative to the data root (object-store prefix)."""
        return f"{RELEASES}/{release}" + (f"/{build_id}" if build_id else "")
