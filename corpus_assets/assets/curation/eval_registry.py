"""eval_registry: the frozen registry of protected evaluation items, named by its digest."""

import dagster as dg

from corpus_assets.domain.curate.decontam import ContaminationIndex, coverage_per_benchmark
from corpus_assets.domain.curate.decontam.eval_registry import EvalItem, EvalRegistry, build_registry
from corpus_assets.domain.layers.registry import EVAL_REGISTRY, layer
from corpus_assets.domain.storage.layer_store import UNPARTITIONED, LayerStore
from corpus_assets.metadata import counts_table, markdown_table, version_metadata
from resources.curation import CurationResource
from resources.storage import StorageResource

REGISTRY_CODE_VERSION = "eval-registry-1"
REGISTRY_TABLES = layer(EVAL_REGISTRY).table_specs()


def load_current_registry(store: LayerStore) -> EvalRegistry:
    """The registry of the current eval_registry version, digest re-verified."""
    version = store.current(EVAL_REGISTRY, UNPARTITIONED)
    if version is None:
        raise FileNotFoundError(
            "eval_registry has not been materialized yet: materialize it first (the demo does; in the UI "
            "select eval_registry and Materialize)"
        )
    registry = EvalRegistry(tuple(EvalItem(**row) for row in version.read_table("items").to_pylist()))
    if registry.digest != version.manifest["registry_digest"]:
        raise ValueError(f"eval_registry {version.version}: items do not match the recorded registry digest")
    return registry


@dg.asset(
    group_name="curation",
    kinds={"python", "parquet"},
    owners=["team:corpus"],
    code_version=REGISTRY_CODE_VERSION,
    description=(
        "Frozen registry of protected evaluation items (benchmark, item id, field, text) built from "
        "the benchmark files named in curation.yaml. Its digest is recorded by every curated version "
        "and, later, by every release manifest. Owner-only on disk."
    ),
)
def eval_registry(storage: StorageResource, curation: CurationResource) -> dg.MaterializeResult:
    cfg = curation.load().decontam
    registry = build_registry(cfg.registry_files, cfg.fields)
    store = storage.store()
    spec = {"code_version": REGISTRY_CODE_VERSION, "files": [str(p) for p in cfg.registry_files], "fields": list(cfg.fields)}
    with store.new_version(EVAL_REGISTRY, UNPARTITIONED, REGISTRY_TABLES, spec) as w:
        w.write("items", [it.as_dict() for it in registry.items])
        version = w.commit(extra_manifest={"registry_digest": registry.digest, "benchmarks": registry.benchmarks()})
    # what the current decontamination policy can check of each benchmark (the curated layer
    # records the same per version, for the policy it ran with)
    cov = coverage_per_benchmark(ContaminationIndex.build(registry, cfg).unit_summary()) if cfg.enabled else {}
    coverage_md = markdown_table(
        ["benchmark", "protected texts", "checked", f"unchecked: under {cfg.short_n} tokens",
         "unchecked: all n-grams suppressed", "long n-gram rule applies"],
        [(b, c["protected"], c["checked"], c["too_short"], c["all_ngrams_suppressed"], c["long_rule"]) for b, c in cov.items()],
    ) if cov else "_decontamination disabled_"
    return dg.MaterializeResult(
        data_version=dg.DataVersion(registry.digest),
        metadata={
            "registry_digest": registry.digest,
            "items": dg.MetadataValue.int(len(registry)),
            "benchmarks": dg.MetadataValue.md(counts_table(registry.benchmarks(), "benchmark")),
            "coverage": dg.MetadataValue.md(coverage_md),
            **version_metadata(version),
        },
    )
