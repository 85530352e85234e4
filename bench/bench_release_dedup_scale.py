"""Release dedup at scale (issue 18): ``sharded_near_dedup`` on 1M and 10M synthetic signatures,
with 1 and 2 workers.

    nice -n 5 .venv/bin/python bench/bench_release_dedup_scale.py --sizes 1000000
    nice -n 5 .venv/bin/python bench/bench_release_dedup_scale.py --sizes 1000000 10000000 --scratch /work/scratch

Data (written once per size to ``--scratch``, deleted at the end unless ``--keep``):

* signatures: ``(n, 128)`` uint32 MinHash-like values (random: real documents of realistic
  length give signatures whose values are uniformly distributed, so random rows are what
  unrelated documents look like), saved with ``np.save`` and only ever opened memory-mapped;
* boilerplate clusters: 1% of the records in clusters of 1,000-20,000 members scattered over the
  index; each member keeps each value of its cluster's base row with probability 0.9 (J to
  the base ~0.9, between members ~0.81);
* order: a random permutation (the total order is unrelated to the index order);
* policy: ``LshPolicy(threshold=0.8, num_perm=128, bands=20, rows=5, bucket_cap=100)``;
  K = ``--shards`` or about 4M band entries per shard;
* verification: signature agreement read from the memmap inside the tasks (a PairVerifier of
  this bench: synthetic records have no text).

Each (size, workers) run is its own process, so its ``ru_maxrss`` is that run's driver peak;
the workers' peaks are read from the LocalCluster's processes (workers=1 runs the tasks in the
driver, so its driver peak includes them). Checks printed: every planted cluster in one
leakage group (every member whose J to the base is >= tau is in the base's group), same output
with 1 and 2 workers (sha256 of the result arrays, counts and report), time ratio between sizes
against linear.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT))

MiB = 1 << 20
M = 128
TAU = 0.8


def rss_peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def read_rows(path: str, rows):
    """Rows of an ``np.save``'d matrix read with ``pread`` (sorted, distinct ``rows``). Not a
    memmap on purpose: random rows of a memory-mapped file that sits in the page cache map
    64 KiB around every touched page (fault-around), and those file pages count in the RSS,
    so a few random rows per page would make the process "use" the whole 5 GB file."""
    import numpy as np

    header = np.load(path, mmap_mode="r")  # for the header only: no page is touched
    shape, dtype, base = header.shape, header.dtype, header.offset
    del header
    width = shape[1] * dtype.itemsize
    with open(path, "rb") as f:
        fd = f.fileno()
        buf = b"".join(os.pread(fd, width, base + int(r) * width) for r in rows.tolist())
    return np.frombuffer(buf, dtype=dtype).reshape(len(rows), shape[1])


class AgreementVerifier:
    """J estimated as the share of equal signature values, the rows read from the file in the
    task (:func:`read_rows`)."""

    def __init__(self, path: str):
        self.path = path

    def prepare(self, needed, workdir):
        return self

    def jaccard_many(self, pairs):
        import numpy as np

        rows = np.unique(pairs)
        sig = read_rows(self.path, rows)
        a, b = np.searchsorted(rows, pairs[:, 0]), np.searchsorted(rows, pairs[:, 1])
        out = np.empty(pairs.shape[0], dtype=np.float64)
        for s in range(0, pairs.shape[0], 1 << 14):
            out[s : s + (1 << 14)] = (sig[a[s : s + (1 << 14)]] == sig[b[s : s + (1 << 14)]]).sum(axis=1) / M
        return out


def generate(n: int, path: Path, seed: int, keep: float = 0.9) -> dict:
    """Signature file + planted clusters (members lists saved next to it)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    sig = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint32, shape=(n, M))
    chunk = 1 << 16
    for s in range(0, n, chunk):
        sig[s : s + chunk] = rng.integers(0, 2**32, size=(min(chunk, n - s), M), dtype=np.uint32)
    target = n // 100
    sizes: list[int] = []
    while sum(sizes) < target:
        sizes.append(int(rng.integers(1_000, 20_001)))
    sizes[-1] -= max(0, sum(sizes) - target)
    if sizes[-1] < 1_000:
        sizes[-1] = 1_000
    members = rng.choice(n, size=sum(sizes), replace=False)
    clusters, at = [], 0
    for size in sizes:
        rows = np.sort(members[at : at + size])
        at += size
        base = np.asarray(sig[rows[0]])
        for s in range(1, size, 8192):
            r = rows[s : s + 8192]
            block = np.asarray(sig[r])
            same = rng.random(block.shape) < keep
            block[same] = np.broadcast_to(base, block.shape)[same]
            sig[r] = block
        clusters.append(rows)
    sig.flush()
    del sig
    np.savez(str(path) + ".clusters.npz", *clusters)
    np.save(str(path) + ".order.npy", rng.permutation(n).astype(np.int64))
    return {"n": n, "clusters": sizes}


def run(n: int, path: Path, workers: int, shards: int, workdir: Path) -> dict:
    import numpy as np

    from corpus_assets.domain.core.compute import Engine
    from corpus_assets.domain.dedup.lsh import LshPolicy
    from corpus_assets.domain.dedup.sharded import SignatureFile, sharded_near_dedup

    policy = LshPolicy(threshold=TAU, num_perm=M, bands=20, rows=5, bucket_cap=100)
    order = np.load(str(path) + ".order.npy")
    engine = Engine(workers=workers)
    if engine.kind == "local":
        engine._client()  # start the cluster before timing (its start is not dedup work)
    t0 = time.perf_counter()
    lines = []

    def log(msg):
        lines.append(f"{time.perf_counter() - t0:8.1f}s {msg}")
        print(lines[-1], file=sys.stderr, flush=True)

    res = sharded_near_dedup(SignatureFile(str(path)), order, policy, AgreementVerifier(str(path)),
                             workdir=workdir, shards=shards, engine=engine, log=log)
    wall = time.perf_counter() - t0
    worker_peaks = []
    if engine.kind == "local":
        peaks = engine._client().run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        worker_peaks = sorted(peaks.values())
    # planted clusters: every member matching the base (J >= tau) in the base's group
    whole, in_group, matching = 0, 0, 0
    with np.load(str(path) + ".clusters.npz") as z:
        clusters = [z[k] for k in z.files]
    for rows in clusters:
        sig = read_rows(str(path), rows)  # rows are sorted, rows[0] the base
        j = (sig[1:] == sig[0]).sum(axis=1) / M
        match = rows[1:][j >= TAU]
        ok = res.component[match] == res.component[rows[0]]
        whole += bool(ok.all())
        in_group += int(ok.sum())
        matching += int(match.size)
    h = hashlib.sha256()
    for a in (res.representative, res.rep_jaccard, res.edges, res.edge_jaccard, res.component):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr((res.candidates, res.stats.as_dict(), res.capped)).encode())
    cap = res.capped
    return {
        "n": n, "workers": workers, "shards": shards, "wall_s": round(wall, 1),
        "driver_peak_mib": round(rss_peak() / MiB), "worker_peak_mib": [round(p / MiB) for p in worker_peaks],
        "candidates": res.candidates, "edges": int(res.edges.shape[0]), "removed": res.removed,
        "clusters": len(clusters), "clusters_whole": whole, "matching_members": matching, "in_base_group": in_group,
        "capped_buckets": cap["buckets"], "members_beyond_cap": cap["members_beyond_cap"],
        "beyond_with_edge": cap["members_with_edge"], "beyond_in_pivot_group": cap["members_in_pivot_group"],
        "pair_emissions": res.stats.pair_emissions, "digest": h.hexdigest()[:16], "log": lines,
    }


def sub(args: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(PROJECT))
    proc = subprocess.run([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, cwd=PROJECT, env=env)
    if proc.returncode:
        raise SystemExit(f"{args} failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--shards", type=int, default=0, help="K (0: about 4M band entries per shard)")
    ap.add_argument("--scratch", default="/tmp")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--keep", action="store_true", help="keep the signature files")
    ap.add_argument("--keep-prob", type=float, default=0.9, help="probability a member keeps a base value")
    ap.add_argument("--gen", help=argparse.SUPPRESS)
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--w", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.gen:
        print(json.dumps(generate(args.n, Path(args.gen), args.seed, args.keep_prob)))
        return
    if args.run:
        work = Path(args.run).parent / "work"
        work.mkdir(exist_ok=True)
        print(json.dumps(run(args.n, Path(args.run), args.w, args.k, work)))
        return
    scratch = Path(args.scratch) / f"bench-release-dedup-{os.getpid()}"
    scratch.mkdir(parents=True)
    results = []
    try:
        for n in args.sizes:
            path = scratch / f"sig-{n}.npy"
            t = time.perf_counter()
            info = sub(["--gen", str(path), "--n", str(n), "--seed", str(args.seed), "--keep-prob", str(args.keep_prob)])
            print(f"generated {n:,} x {M} uint32 ({path.stat().st_size / MiB:,.0f} MiB) in {time.perf_counter() - t:.0f}s; "
                  f"clusters {info['clusters']}", file=sys.stderr, flush=True)
            k = args.shards or max(1, round(n * 20 / 4_000_000))
            for w in args.workers:
                res = sub(["--run", str(path), "--n", str(n), "--w", str(w), "--k", str(k)])
                res["cluster_sizes"] = info["clusters"]
                results.append(res)
                print(json.dumps({k2: v for k2, v in res.items() if k2 != "log"}), file=sys.stderr, flush=True)
            if not args.keep:
                for f in scratch.glob(f"sig-{n}.npy*"):
                    f.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)

    import numpy

    print(f"\nPython {platform.python_version()}, numpy {numpy.__version__}, {os.cpu_count()} CPUs; "
          f"bands=20 rows=5 cap=100 tau={TAU}; 1% of records in clusters of 1k-20k, members keep a base value "
          f"with p={args.keep_prob}\n")
    print("| records | workers | K | wall s | driver peak RSS MiB | worker peak RSS MiB | candidates | verified edges "
          "| removed | capped buckets | members beyond cap (with edge / in pivot group) | clusters whole | members J>=tau to base: in its group | digest |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for r in results:
        print(f"| {r['n']:,} | {r['workers']} | {r['shards']} | {r['wall_s']:.1f} | {r['driver_peak_mib']:,} "
              f"| {', '.join(f'{p:,}' for p in r['worker_peak_mib']) or '(in driver)'} | {r['candidates']:,} "
              f"| {r['edges']:,} | {r['removed']:,} | {r['capped_buckets']:,} | {r['members_beyond_cap']:,} "
              f"({r['beyond_with_edge']:,} / {r['beyond_in_pivot_group']:,}) | {r['clusters_whole']}/{r['clusters']} "
              f"| {r['in_base_group']:,}/{r['matching_members']:,} | {r['digest']} |")
    by = {(r["n"], r["workers"]): r for r in results}
    for n in args.sizes:
        d = {by[(n, w)]["digest"] for w in args.workers if (n, w) in by}
        print(f"{n:,}: same output with workers {args.workers}: {len(d) == 1}")
    for w in args.workers:
        for a, b in zip(args.sizes, args.sizes[1:]):
            ra, rb = by[(a, w)], by[(b, w)]
            ratio = rb["wall_s"] / ra["wall_s"]
            print(f"workers {w}: time({b:,}) / time({a:,}) = {ratio:.2f} (linear {b / a:.2f}; "
                  f"{ratio / (b / a):.2f}x linear)")
    worst = max([p for r in results for p in r["worker_peak_mib"]] or [0])
    print(f"largest worker peak RSS {worst:,} MiB ({'under' if worst < 4096 else 'OVER'} 4 GiB); "
          f"largest driver peak {max(r['driver_peak_mib'] for r in results):,} MiB")


if __name__ == "__main__":
    main()
