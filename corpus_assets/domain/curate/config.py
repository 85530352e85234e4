"""``curation.yaml``: template removal, quality filters, PII redaction and decontamination policies.

Every value here feeds a policy version recorded with each curated version, so a threshold
change is visible as a new policy (and as "unsynced" in the Dagster UI).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from corpus_assets.domain.core.config_files import read_yaml, validate
from corpus_assets.domain.curate.decontam import DecontamConfig
from corpus_assets.domain.curate.pii import PiiConfig
from corpus_assets.domain.curate.quality import QualityConfig
from corpus_assets.domain.curate.templates import TemplateConfig


class CurationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    templates: TemplateConfig = Field(default_factory=TemplateConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    pii: PiiConfig = Field(default_factory=PiiConfig)
    decontam: DecontamConfig = Field(default_factory=DecontamConfig)


def load_curation(path: Path | str, env: Optional[dict[str, str]] = None) -> CurationConfig:
    """Read and validate a curation file; relative registry paths resolve against its folder."""
    path = Path(path)
    cfg = validate(CurationConfig, read_yaml(path, env) or {}, str(path))
    cfg.decontam.registry_files = [
        p if Path(p).is_absolute() else (path.parent / p).resolve() for p in cfg.decontam.registry_files
    ]
    return cfg
