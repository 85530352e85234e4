"""The ``storage`` resource: versioned Parquet layers under ``$CORPUS_HOME`` (see layer_store)."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from corpus_assets.domain.layer_store import LayerStore
from corpus_assets.domain.settings import corpus_home


class StorageResource(ConfigurableResource):
    """Layout, bounded-batch Parquet writing and atomic publication of layer versions."""

    home: str = Field(default_factory=lambda: str(corpus_home()), description="data root ($CORPUS_HOME)")
    rows_per_group: int = Field(default=2048, description="rows per Parquet row group (content, not caller, decides)")
    bytes_per_group: int = Field(default=64 << 20, description="byte budget per row group")

    def store(self) -> LayerStore:
        return LayerStore(self.home, rows_per_group=self.rows_per_group, bytes_per_group=self.bytes_per_group)
