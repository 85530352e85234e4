"""The ``sources`` resource: the validated ``sources.yaml``."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from corpus_assets.domain.core.settings import sources_path
from corpus_assets.domain.ingest.sources_config import SourcesFile, load_sources


class SourcesResource(ConfigurableResource):
    """Declared sources (kinds, governance, crawl limits, schedules) and the canonicalization policy."""

    path: str = Field(default_factory=lambda: str(sources_path()), description="path of sources.yaml")

    def load(self) -> SourcesFile:
        return load_sources(self.path)
