"""The ``storage`` resource: versioned Parquet layers under ``$CORPUS_HOME`` (see layer_store),
mirrored to an object store when ``CORPUS_HOME`` is a URL (see object_store)."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.storage.object_store import ObjectStore, storage_options_from_env
from corpus_assets.domain.core.settings import corpus_home, data_url


class StorageResource(ConfigurableResource):
    """Layout, bounded-batch Parquet writing and atomic publication of layer versions."""

    home: str = Field(default_factory=lambda: str(corpus_home()),
                      description="local root: the data root, or the cache and working root of an object store")
    url: str = Field(default_factory=lambda: data_url() or "",
                     description="object-store data root (s3://bucket/prefix) when CORPUS_HOME is a URL; empty: local")
    rows_per_group: int = Field(default=2048, description="rows per Parquet row group (content, not caller, decides)")
    bytes_per_group: int = Field(default=64 << 20, description="byte budget per row group")

    def store(self) -> LayerStore:
        remote = ObjectStore(self.url, storage_options_from_env()) if self.url else None
        return LayerStore(self.home, remote=remote, rows_per_group=self.rows_per_group, bytes_per_group=self.bytes_per_group)
