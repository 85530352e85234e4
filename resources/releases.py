"""The ``releases`` resource: release specs and the project dedup policy."""

from dagster import ConfigurableResource
from pydantic import Field

from corpus_assets.domain.dedup.signatures_layer import DedupFile, load_dedup_file
from corpus_assets.domain.release.spec import ReleaseSpec, load_release_spec
from corpus_assets.domain.core.settings import dedup_path, releases_dir


class ReleasesResource(ConfigurableResource):
    """Where release specs live, and the MinHash policy shared by every release."""

    folder: str = Field(default_factory=lambda: str(releases_dir()), description="folder of releases/<name>.yaml")
    dedup_file: str = Field(default_factory=lambda: str(dedup_path()), description="path of dedup.yaml")

    def spec(self, name: str) -> ReleaseSpec:
        from pathlib import Path

        path = Path(self.folder) / f"{name}.yaml"
        if not path.is_file():
            raise FileNotFoundError(f"release {name!r} has no spec at {path}")
        return load_release_spec(path)

    def dedup(self) -> DedupFile:
        return load_dedup_file(self.dedup_file)
