"""The ``curation`` resource: the validated ``curation.yaml``."""

from dagster import ConfigurableResource
from pydantic import Field

from corpus_assets.domain.curate.config import CurationConfig, load_curation
from corpus_assets.domain.core.settings import curation_path


class CurationResource(ConfigurableResource):
    """Quality, PII and decontamination policies for the curated layer."""

    path: str = Field(default_factory=lambda: str(curation_path()), description="path of curation.yaml")

    def load(self) -> CurationConfig:
        return load_curation(self.path)
