"""The ``release_specs`` sensor: every valid ``releases/<name>.yaml`` becomes a ``releases`` partition.

A spec is checked completely when it is read (``corpus_assets.domain.release.spec``): an invalid
one is never registered, and the tick's log (in the UI: the sensor -> a tick -> logs)
has one line per problem, ``<file>: <field>: <message>``. The cursor holds the digest of each
registered spec as written (``ReleaseSpec.as_written``), so a tick with nothing new does nothing.
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
    folder = releases_dir()
    specs, errors = discover_release_specs(folder)
    existing = set(context.instance.get_dynamic_partitions(releases_partitions.name))
    for file, error in sorted(errors.items()):
        # one line per problem, each naming the file and the field: what the tick log shows in the UI
        lines = error.problem_lines(str(folder / file))
        stem = file[: -len(".yaml")]
        status = (f"invalid; partition {stem!r} was registered earlier and its runs fail until the spec is fixed"
                  if stem in existing else "not registered")
        context.log.warning(f"release spec {file} {status} ({len(lines)} problem{'s' if len(lines) != 1 else ''}):\n"
                            + "\n".join(lines))
    known = json.loads(context.cursor) if context.cursor else {}
    # the spec as written (ReleaseSpec.as_written), the same mapping release_manifest puts into build ids
    digests = {name: canonical_digest(spec.as_written()) for name, spec in specs.items()}
    new = sorted(n for n in specs if n not in existing)
    changed = sorted(n for n in specs if n in existing and known.get(n) not in (None, digests[n]))
    if new:
        context.log.info(f"registering releases: {', '.join(new)}")
    if changed:
        context.log.info(f"release specs changed: {', '.join(changed)} (their release assets are now stale)")
    requests = [releases_partitions.build_add_request(new)] if new else []
    cursor = json.dumps(digests, sort_keys=True)
    if requests:
        return dg.SensorResult(dynamic_partitions_requests=requests, cursor=cursor)
    # nothing to add: say what the tick found (the UI shows this instead of "empty result")
    summary = [f"{len(errors)} invalid spec(s): {', '.join(sorted(errors))}"] if errors else []
    summary += [f"changed: {', '.join(changed)}"] if changed else []
    return dg.SensorResult(skip_reason="; ".join(summary) or f"{len(specs)} release spec(s), none new", cursor=cursor)
