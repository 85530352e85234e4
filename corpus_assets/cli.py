"""``corpus``: the actions a user takes outside the Dagster UI.

    corpus demo                 build the demo end to end (through Dagster) and print a summary
    corpus sources              validate sources.yaml and list the sources
    corpus snapshot SOURCE      capture a new snapshot of SOURCE and materialize it through Dagster
    corpus layers               list current layer versions under $CORPUS_HOME
    corpus partitions [prune]   list (prune: remove) partition keys that are not valid keys, e.g.
                                added by hand in the UI
    corpus compact-snapshots --source S --older-than 30d [--dry-run]
                                fold each month of S's captures older than the cutoff into the
                                month's newest capture; remove the others (partitions and layers)
    corpus cache prune          object-store data root: drop cached versions the store no longer
                                holds and apply revocations to cached release builds
    corpus releases [NAME] [--audit]
                                the release registry: published / superseded / revoked versions
                                (--audit: re-read every build's manifest against its registry row)
    corpus releases check [NAME|FILE]
                                check release specs (one, or every releases/*.yaml): OK or one line
                                per problem (file: field: message); exit 1 if any is invalid
    corpus verify RELEASE|RELEASE@BUILD|DIR
                                re-hash a published release against its manifest (and signature);
                                a revoked build is reported REVOKED (exit 1)
    corpus consume RELEASE --run-id ID [--build-id B] [--consumer WHO] [--force]
                                record that a training run consumed a release version (a
                                superseded or revoked one only with --force, recorded as forced)
    corpus delete --record-id ID | --uri URI | --source ID | --content-sha256 HEX | --content-file F
                  --requester WHO --reason WHY [--near-duplicates --near-threshold J]
                                file a deletion request (the deletion sensor applies it)
    corpus recipe run --config X --output DIR [--resume] [--export-hf DIR]
                                run a recipe data job (generate, clean, dedup/exclude, calibrate, select)
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from corpus_assets.domain.ingest.sources_config import ConfigError


def _cmd_demo(args) -> int:
    from corpus_assets.demo import run_demo

    run_demo(port=args.port)
    return 0


def _cmd_sources(args) -> int:
    from corpus_assets.domain.core.settings import sources_path
    from corpus_assets.domain.ingest.sources_config import load_sources

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
    from corpus_assets.domain.core.keys import snapshot_key
    from corpus_assets.domain.core.settings import ensure_homes
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
    from corpus_assets.domain.storage.layer_store import LayerStore
    from corpus_assets.domain.core.settings import corpus_home

    store = LayerStore.from_env(corpus_home())
    assets = store.assets()
    if not assets:
        print(f"no layers under {store.data_root}")
        return 0
    for asset in assets:
        for part in store.partitions(asset):
            m = store.current_manifest(asset, part)  # manifests only: nothing is downloaded
            rows = ", ".join(f"{t}={info['rows']}" for t, info in sorted(m["tables"].items()))
            print(f"{asset:<20} {part:<36} {m['version']}  {rows}")
    return 0


def _cmd_cache(args) -> int:
    from corpus_assets.domain.storage.layer_store import LayerStore
    from corpus_assets.domain.release.mirror import prune_revoked
    from corpus_assets.domain.core.settings import corpus_home

    store = LayerStore.from_env(corpus_home())
    if store.remote is None:
        print(f"CORPUS_HOME is a local directory ({store.home}): there is no cache to prune")
        return 0
    removed = store.prune_cache()
    revoked = prune_revoked(store.remote, store.root.releases)
    for path in removed:
        print(f"removed {path}")
    for build in revoked:
        print(f"withdrew the shards of revoked build {build}")
    print(f"cache {store.home}: {len(removed)} version(s) or shard set(s) removed, {len(revoked)} revoked build(s) withdrawn")
    return 0


def _catalog():
    from corpus_assets.domain.storage.catalog import Catalog
    from corpus_assets.domain.core.settings import catalog_path

    return Catalog.at(catalog_path())


def _reconcile(cat, audit: bool = False):
    """Make the registry agree with the published builds (local root, or the bucket) before it is
    trusted; what changed or disagrees goes to stderr, so stdout stays the command's answer.
    ``audit``: also re-read every registered build's manifest (``corpus releases --audit``)."""
    from corpus_assets.domain.core.data_root import DataRoot
    from corpus_assets.domain.core.settings import corpus_home
    from corpus_assets.domain.release.registry import reconcile
    from corpus_assets.domain.storage.object_store import store_from_env

    result = reconcile(cat, DataRoot(corpus_home()).releases, remote=store_from_env(), audit=audit)
    for line in result.lines():
        print(f"corpus: {line}", file=sys.stderr)
    return result


class _BadTarget(ValueError):
    """A ``corpus verify`` target that is not a release name, ``NAME@BUILD_ID`` or a release directory."""


class _RevokedBuild(Exception):
    """The build ``corpus verify`` was asked about is revoked (its ``REVOKED.json`` says so)."""

    def __init__(self, where: str, note: dict, release: str | None = None, build: str | None = None) -> None:
        super().__init__(where)
        self.where, self.note, self.release, self.build = where, note, release, build


def _release_dir(target: str):
    """A release directory: a path, ``NAME`` (its CURRENT version) or ``NAME@BUILD_ID``.

    The name and build id are validated before they touch a path (``NAME@../..`` is refused with
    ``_BadTarget``), and the directory must stay inside the releases folder. A revoked build
    (``REVOKED.json`` in the directory or, with an object-store data root, in the bucket) raises
    ``_RevokedBuild``."""
    from pathlib import Path

    from corpus_assets.domain.core.data_root import DataRoot
    from corpus_assets.domain.core.keys import confine, validate_release_name
    from corpus_assets.domain.core.settings import corpus_home
    from corpus_assets.domain.release.publish import current_release, validate_build_id
    from corpus_assets.domain.release.registry import read_revocation_note
    from corpus_assets.domain.storage.object_store import store_from_env
    from corpus_assets.domain.release.mirror import REVOKED_NAME, pull_release, remote_current

    p = Path(target)
    if p.is_dir() and (p / "manifest.json").exists():
        note = read_revocation_note((p / REVOKED_NAME).read_bytes() if (p / REVOKED_NAME).is_file() else None)
        if note is not None:
            raise _RevokedBuild(str(p), note)
        return p
    name, at, build = target.partition("@")
    try:
        validate_release_name(name)
        if at:
            validate_build_id(build)
    except ValueError as exc:
        raise _BadTarget(f"{exc} (expected a release name, NAME@BUILD_ID or a release directory)") from None
    root = DataRoot(corpus_home()).releases
    remote = store_from_env()
    if remote is not None:  # the object store is the authority: its pointer, its sealed copy
        build = build or remote_current(remote, name) or ""
        if build:
            key = f"{DataRoot.release_key(name, build)}/{REVOKED_NAME}"
            note = read_revocation_note(remote.read_bytes(key))
            if note is not None:
                raise _RevokedBuild(remote.uri(DataRoot.release_key(name, build)), note, name, build)
        if build and pull_release(remote, root, name, build) is None:
            raise ValueError(f"release {name!r} has no sealed build {build!r} in {remote.uri('releases/' + name)}")
    if build:
        d = root / name / build
        if not d.is_dir():
            raise ValueError(f"release {name!r} has no build {build!r} under {root / name}")
    else:
        d = current_release(root, name)
        if d is None:
            raise ValueError(f"release {name!r} has no published version under {root / name} (run release_job first)")
    try:
        confine(root, d)
    except ValueError as exc:
        raise _BadTarget(str(exc)) from None
    note = read_revocation_note((d / REVOKED_NAME).read_bytes() if (d / REVOKED_NAME).is_file() else None)
    if note is not None:
        raise _RevokedBuild(str(d), note, name, d.name)
    return d


def _revoked_line(exc: _RevokedBuild, cat) -> str:
    """``REVOKED <path>: revoked <date> by deletion request(s) <ids>; successor <build or none>``."""
    note = exc.note
    release = exc.release or note.get("release")
    build = exc.build or note.get("build_id")
    when = note.get("revoked_at")
    requests = note.get("request_ids") if isinstance(note.get("request_ids"), list) else []
    successor = note.get("successor_build_id")
    if (not when or not requests) and isinstance(release, str) and isinstance(build, str):
        from corpus_assets.domain.release.registry import registry

        try:  # an older note without the time: the registry's record of the revocation
            row = next((r for r in registry(cat, release) if r["build_id"] == build and r["status"] == "revoked"), None)
        except ValueError:
            row = None
        if row is not None:
            when = when or row["revoked_at"]
            requests = requests or row["request_ids"]
            successor = successor or row["successor_build_id"]
    return (f"REVOKED {exc.where}: revoked {when or 'at an unrecorded time'} by deletion request(s) "
            f"{', '.join(map(str, requests)) or 'unrecorded'}; successor {successor or 'none'}")


def _cmd_partitions(args) -> int:
    """List the dynamic partition keys that are not valid keys (added by hand in the UI); with
    ``prune``, remove them, so they stop being an upstream of every release."""
    import dagster as dg

    from corpus_assets.partitions import invalid_keys

    with dg.DagsterInstance.get() as instance:
        bad = invalid_keys(instance)
        for name, keys in sorted(bad.items()):
            for key, why in keys:
                if args.action == "prune":
                    instance.delete_dynamic_partition(name, key)
                    print(f"removed {name} partition {key!r}: {why}")
                else:
                    print(f"invalid {name} partition {key!r}: {why}")
        n = sum(len(v) for v in bad.values())
        counts = ", ".join(f"{name} {len(instance.get_dynamic_partitions(name))}" for name in ("snapshots", "releases"))
    verb = "removed" if args.action == "prune" else "found (remove them with `corpus partitions prune`)"
    print(f"{n} invalid partition key(s) {verb}; partitions now: {counts}")
    return 0


def _cmd_compact_snapshots(args) -> int:
    """Bound the snapshot partition count: corpus_assets/snapshot_compaction.py."""
    import dagster as dg

    from corpus_assets.definitions import build_definitions
    from corpus_assets.domain.core.settings import corpus_home, releases_dir
    from corpus_assets.domain.ingest.compaction import CompactionError
    from corpus_assets.domain.storage.layer_store import LayerStore
    from corpus_assets.snapshot_compaction import compact_source, parse_age

    age = parse_age(args.older_than)
    defs = build_definitions()
    with dg.DagsterInstance.get() as instance:
        try:
            compact_source(instance, defs, LayerStore.from_env(corpus_home()), args.source, older_than=age,
                           releases_dir=releases_dir(), dry_run=args.dry_run)
        except CompactionError as exc:
            print(f"corpus compact-snapshots: REFUSED: {exc}", file=sys.stderr)
            return 1
    return 0


def _cmd_verify(args) -> int:
    from corpus_assets.domain.release.publish import ReleaseVerificationError, verify_release
    from corpus_assets.domain.release.signing import SignatureError, SigningKeyError

    cat = _catalog()
    _reconcile(cat)
    try:
        path = _release_dir(args.release)
    except _BadTarget as exc:
        print(f"corpus verify: REFUSED {args.release}: {exc}", file=sys.stderr)
        return 1
    except _RevokedBuild as exc:
        print(_revoked_line(exc, cat))
        return 1
    except ReleaseVerificationError as exc:  # the object store's copy failed the check on download
        print(f"corpus verify: REFUSED {args.release}: {exc}", file=sys.stderr)
        return 1
    try:
        report = verify_release(path, public_key=args.public_key)
    except (ReleaseVerificationError, SignatureError, SigningKeyError) as exc:
        print(f"corpus verify: REFUSED {path}: {exc}", file=sys.stderr)
        return 1
    sig = f", signature OK (key {report.key_id[:16]})" if report.signature_checked else (", signed (not checked: no --public-key)" if report.signed else ", unsigned")
    print(f"OK {path}: {report.files} files, {report.bytes} bytes, content digest {report.content_digest}{sig}")
    return 0


def _cmd_consume(args) -> int:
    import json

    from corpus_assets.domain.release.registry import RegistryError, current_published, record_consumption, validate_run_id

    try:
        validate_run_id(args.run_id, "--run-id")
    except RegistryError as exc:
        raise ValueError(str(exc)) from None
    cat = _catalog()
    reconciled = _reconcile(cat)
    build = args.build_id
    if build is None:
        row = current_published(cat, args.release)
        if row is None and not reconciled.problems_of(args.release):
            raise ValueError(f"release {args.release!r} has no published version in the registry")
        build = row["build_id"] if row is not None else None
    disagree = reconciled.problems_of(args.release, build)
    if disagree:  # the registry cannot say which build this run read: record nothing rather than a guess
        raise ValueError(f"release {args.release!r}: the registry and the published builds disagree "
                         f"({disagree[0]['problem']}); nothing recorded")
    try:
        row = record_consumption(cat, args.run_id, args.release, build, args.consumer, args.note or "", force=args.force)
    except RegistryError as exc:
        raise ValueError(str(exc)) from None
    if row["note"].startswith("forced: "):
        print(f"corpus consume: {row['note'].split(';')[0]} (release {args.release} build {build})", file=sys.stderr)
    print(json.dumps(row, sort_keys=True, default=str))
    return 0


def _cmd_releases(args) -> int:
    if args.name == "check":
        return _check_release_specs(args.target)
    if args.target is not None:
        raise ValueError(f"unexpected argument {args.target!r} (to check a spec: corpus releases check {args.target})")
    from corpus_assets.domain.release.registry import registry

    cat = _catalog()
    reconciled = _reconcile(cat, audit=args.audit)
    if args.audit:
        print(f"corpus: audit: {reconciled.manifests_read} sealed manifest(s) read, {len(reconciled.problems)} problem(s)",
              file=sys.stderr)
    rows = registry(cat, args.name)
    if not rows:
        print("no published releases")
    for r in rows:
        extra = f" -> {r['successor_build_id'][:16]}" if r.get("successor_build_id") else ""
        print(f"{r['release']:<16} {r['build_id'][:16]} {r['status']:<10} {r['published_at']} {r['path']}{extra}")
    return 0


def _shown(path) -> str:
    """``path`` relative to the working directory when it is below it (``releases/demo.yaml``)."""
    from pathlib import Path

    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _check_release_specs(target: str | None) -> int:
    """``corpus releases check [NAME|FILE]``: ``OK <file>`` per valid spec, one ``<file>: <field>:
    <message>`` line per problem otherwise; 1 if any spec is invalid (or not found)."""
    from pathlib import Path

    from corpus_assets.domain.core.settings import releases_dir
    from corpus_assets.domain.release.spec import load_release_spec

    folder = releases_dir()
    if target is None:
        if not folder.is_dir():
            print(f"{_shown(folder)}: no such releases folder (set CORPUS_RELEASES)")
            return 1
        paths = sorted(folder.glob("*.yaml"))
        if not paths:
            print(f"{_shown(folder)}: no release specs (releases/<name>.yaml)")
            return 0
    elif target.endswith((".yaml", ".yml")) or "/" in target or Path(target).is_file():
        paths = [Path(target)]  # a file, checked wherever it is (a missing one is reported below)
    else:
        path = folder / f"{target}.yaml"
        if not path.is_file():
            known = sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
            print(f"{_shown(path)}: unknown release {target!r}: no such spec "
                  f"(known releases: {', '.join(known) or 'none'})")
            return 1
        paths = [path]
    invalid = 0
    for path in paths:
        try:
            load_release_spec(path)
        except ConfigError as exc:
            invalid += 1
            for line in exc.problem_lines(_shown(path)):
                print(line)
        else:
            print(f"OK {_shown(path)}")
    return 1 if invalid else 0


def _cmd_delete(args) -> int:
    from corpus_assets.domain.deletion.requests import DeletionRequestError, file_request, parse_request

    data = {"requester": args.requester, "reason": args.reason}
    chosen = [(k, v) for k, v in (("record", args.record_id), ("uri", args.uri), ("source", args.source),
                                  ("content", args.content_sha256), ("content_file", args.content_file)) if v]
    if len(chosen) != 1:
        raise ValueError("give exactly one of --record-id, --uri, --source, --content-sha256, --content-file")
    kind, value = chosen[0]
    if kind == "record":
        data.update(kind="record", record_id=value)
    elif kind == "uri":
        data.update(kind="uri", uri=value)
    elif kind == "source":
        data.update(kind="source", source_id=value)
    elif kind == "content":
        data.update(kind="content", content_sha256=value)
    else:
        with open(value, encoding="utf-8") as f:  # the text is hashed here and never stored
            data.update(kind="content", content_text=f.read())
    if args.near_duplicates:
        data.update(near_duplicates=True, near_threshold=args.near_threshold)
    try:
        request = parse_request(data)
    except DeletionRequestError as exc:
        raise ValueError(f"deletion request refused: {exc}") from None
    request_id = file_request(_catalog(), request)
    print(request_id)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["recipe"]:
        from corpus_assets.domain.recipe.cli import recipe_main

        return recipe_main(argv[1:])
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
    sub.add_parser("recipe", help="recipe data jobs: corpus recipe run --config X --output DIR [--resume] [--export-hf DIR]")
    p = sub.add_parser("partitions", help="list dynamic partition keys that are not valid keys; `prune` removes them")
    p.add_argument("action", nargs="?", choices=["prune"], default=None)
    p.set_defaults(func=_cmd_partitions)
    p = sub.add_parser("compact-snapshots", help="fold old captures of a source into one partition per month")
    p.add_argument("--source", required=True)
    p.add_argument("--older-than", required=True, help="age of the captures to compact: e.g. 30d, 12h, 2w")
    p.add_argument("--dry-run", action="store_true", help="say what would be folded; change nothing")
    p.set_defaults(func=_cmd_compact_snapshots)
    p = sub.add_parser("layers", help="list the current layer versions")
    p.set_defaults(func=_cmd_layers)
    p = sub.add_parser("cache", help="object-store data root: prune the local cache (see docs/operations.md)")
    p.add_argument("action", choices=["prune"])
    p.set_defaults(func=_cmd_cache)
    p = sub.add_parser("releases", help="list the release registry; `releases check [NAME|FILE]` checks release specs",
                       description="corpus releases [NAME]: the release registry. corpus releases check [NAME|FILE]: "
                                   "check one release spec (by release name or file) or every releases/*.yaml; "
                                   "exit 1 if any is invalid.")
    p.add_argument("name", nargs="?", default=None, help="a release name, or `check`")
    p.add_argument("target", nargs="?", default=None, help="with check: a release name or a spec file (default: all)")
    p.add_argument("--audit", action="store_true",
                   help="re-read every registered build's manifest and report a content digest the registry disagrees "
                        "with (reads one manifest per build; without it only new builds' and CURRENT's are read)")
    p.set_defaults(func=_cmd_releases)
    p = sub.add_parser("verify", help="re-hash a published release against its manifest (a revoked build: REVOKED, exit 1)")
    p.add_argument("release", help="release name (its CURRENT version), NAME@BUILD_ID, or a release directory")
    p.add_argument("--public-key", default=None, help="Ed25519 public key (PEM or raw) kept outside the release directory")
    p.set_defaults(func=_cmd_verify)
    p = sub.add_parser("consume", help="record that a training run consumed a release version")
    p.add_argument("release")
    p.add_argument("--run-id", required=True,
                   help="1-200 characters: letters, digits and ._:@+-, starting with a letter or digit")
    p.add_argument("--build-id", default=None, help="default: the release's current published build")
    p.add_argument("--consumer", default="trainer")
    p.add_argument("--note", default="")
    p.add_argument("--force", action="store_true",
                   help="record a superseded or revoked build anyway (the record's note says it was forced)")
    p.set_defaults(func=_cmd_consume)
    p = sub.add_parser("delete", help="file a deletion request")
    p.add_argument("--record-id")
    p.add_argument("--uri")
    p.add_argument("--source")
    p.add_argument("--content-sha256", help="sha256 of the record text (text_sha256)")
    p.add_argument("--content-file", help="a file holding the text to take down (hashed, never stored)")
    p.add_argument("--near-duplicates", action="store_true", help="content takedowns: also near duplicates")
    p.add_argument("--near-threshold", type=float, default=None, help="Jaccard threshold for --near-duplicates")
    p.add_argument("--requester", required=True)
    p.add_argument("--reason", required=True)
    p.set_defaults(func=_cmd_delete)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, KeyError, ValueError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"corpus: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
