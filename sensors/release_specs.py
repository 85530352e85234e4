"""The ``release_specs`` sensor: every valid ``releases/<name>.yaml`` becomes a ``releases`` partition.

Invalid specs are reported in the tick's log with the field that is wrong and never registered.
The cursor holds the digest of each registered spec, so a tick with nothing new does nothing.
"""

import json

import dagster as dg

from corpus_assets.domain.core.hashing import canonical_digest
from corpus_assets.domain.release.spec import discover_release_specs
from corpus_assets.domain.core.settings import releases_dir
from corpus_assets.partitions import releases_partitions


@dg.sensor(
    name="release_specs",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registers every valid `releases/<name>.yaml` as a partition of `releases`; logs invalid specs.",
)
def release_specs_sensor(context: dg.SensorEvaluationContext):
    specs, errors = discover_release_specs(releases_dir())
    for name, message in sorted(errors.items()):
        context.log.warning(f"release spec {name} not registered:\n{message}")
    known = json.loads(context.cursor) if context.cursor else {}
    digests = {name: canonical_digest(spec.model_dump(mode="json")) for name, spec in specs.items()}
    existing = set(context.instance.get_dynamic_partitions(releases_partitions.name))
    new = sorted(n for n in specs if n not in existing)
    changed = sorted(n for n in specs if n in existing and known.get(n) not in (None, digests[n]))
    if new:
        context.log.info(f"registering releases: {', '.join(new)}")
    if changed:
        context.log.info(f"release specs changed: {', '.join(changed)} (their release assets are now stale)")
    requests = [releases_partitions.build_add_request(new)] if new else []
    return dg.SensorResult(dynamic_partitions_requests=requests, cursor=json.dumps(digests, sort_keys=True))
