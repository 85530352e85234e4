"""``corpus recipe run --config X --output DIR [--resume] [--export-hf DIR]`` as a pure function.

``recipe_main(argv)`` returns the exit code (``argv`` starts after ``corpus recipe``). The last
stdout line is one JSON object (``dataset_id``, ``dataset_path``, ``training_dataset_path``);
errors exit 2 with ``corpus recipe: error: <message>``, an interrupt 130 after the job recorded
``cancelled``; ``--export-hf`` is checked before the job runs.

Decisions: docs/recipes.md#command-line
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["recipe_main"]

PROG = "corpus recipe"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Recipe data jobs (generate, clean, calibrate, select, publish).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run or resume a data job")
    run.add_argument("--config", required=True, type=Path, help="job config (YAML or JSON)")
    run.add_argument("--output", required=True, type=Path, help="job output directory (new, or existing with --resume)")
    run.add_argument("--resume", action="store_true", help="continue the job in --output")
    run.add_argument("--export-hf", type=Path, default=None, help="also export the training view to this new directory")
    return p


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def recipe_main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except _UsageError as exc:
        return _fail(str(exc))

    from corpus_assets.domain.recipe.config import load_config
    from corpus_assets.domain.recipe.executor import JobCancelled, run_data_job
    from corpus_assets.domain.recipe.hf_export import export_hf_dataset
    from corpus_assets.domain.recipe.protocol import RecipeError

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    try:
        export = args.export_hf
        if export is not None and export.exists() and (not export.is_dir() or any(export.iterdir())):
            raise RecipeError(f"--export-hf: {export} already exists and is not empty")
        config = load_config(args.config)
        snapshot = run_data_job(config, args.output, resume=args.resume)
        result = {"dataset_id": snapshot.dataset_id, "dataset_path": str(snapshot.path)}
        if export is not None:
            result["training_dataset_path"] = str(export_hf_dataset(snapshot, export))
    except (KeyboardInterrupt, JobCancelled):
        print(f"{PROG}: cancelled", file=sys.stderr)
        return 130
    except (RecipeError, ValueError, OSError) as exc:
        return _fail(str(exc))
    except Exception as exc:  # a recipe or calibrator bug: still a clean error line, exit 2
        return _fail(f"{type(exc).__name__}: {exc}")
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(recipe_main())
