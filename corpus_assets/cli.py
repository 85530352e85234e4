"""``corpus``: the actions a user takes outside the Dagster UI.

    corpus demo                 build the demo end to end (through Dagster) and print a summary
    corpus sources              validate sources.yaml and list the sources
    corpus snapshot SOURCE      capture a new snapshot of SOURCE and materialize it through Dagster
    corpus layers               list current layer versions under $CORPUS_HOME

Later issues add verify, delete, consume and recipe.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from corpus_assets.domain.sources_config import ConfigError


def _cmd_demo(args) -> int:
    from corpus_assets.demo import run_demo

    run_demo(port=args.port)
    return 0


def _cmd_sources(args) -> int:
    from corpus_assets.domain.settings import sources_path
    from corpus_assets.domain.sources_config import load_sources

    path = args.file or sources_path()
    cfg = load_sources(path)
    print(f"{path}: {len(cfg.sources)} sources, valid")
    for s in cfg.sources:
        where = getattr(s, "root", None) or ", ".join(getattr(s, "seeds", []))
        sched = f" schedule={s.schedule!r}" if s.schedule else ""
        print(f"  {s.id:<20} {s.kind:<10} {where}{sched}")
    return 0


def _cmd_snapshot(args) -> int:
    import dagster as dg

    from corpus_assets.demo import run_snapshot
    from corpus_assets.domain.keys import snapshot_key
    from corpus_assets.domain.settings import ensure_homes
    from corpus_assets.partitions import snapshots_partitions

    ensure_homes()
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    source = defs.resources["sources"].load().get(args.source)
    key = snapshot_key(source.id, datetime.now(timezone.utc))
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(snapshots_partitions.name, [key])
        run_snapshot(defs, instance, key)
    print(key)
    return 0


def _cmd_layers(args) -> int:
    from corpus_assets.domain.layer_store import LayerStore
    from corpus_assets.domain.settings import corpus_home

    store = LayerStore(corpus_home())
    if not store.layers_root.is_dir():
        print(f"no layers under {store.layers_root}")
        return 0
    for asset_dir in sorted(p for p in store.layers_root.iterdir() if p.is_dir()):
        for part in store.partitions(asset_dir.name):
            v = store.current(asset_dir.name, part)
            rows = ", ".join(f"{t}={m['rows']}" for t, m in sorted(v.manifest["tables"].items()))
            print(f"{asset_dir.name:<20} {part:<36} {v.version}  {rows}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corpus", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="build the demo end to end and print a summary")
    p.add_argument("--port", type=int, default=None, help="port for the local pydoc server (default 7464 or a free one)")
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser("sources", help="validate sources.yaml and list the sources")
    p.add_argument("--file", default=None, help="sources file (default $CORPUS_SOURCES or ./sources.yaml)")
    p.set_defaults(func=_cmd_sources)
    p = sub.add_parser("snapshot", help="capture and materialize a new snapshot of a source")
    p.add_argument("source")
    p.set_defaults(func=_cmd_snapshot)
    p = sub.add_parser("layers", help="list the current layer versions")
    p.set_defaults(func=_cmd_layers)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, KeyError, ValueError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"corpus: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
