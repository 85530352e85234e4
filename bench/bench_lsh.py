"""Release-level LSH + clustering at scale (issue 4): time and peak memory at 250k / 500k / 1M
synthetic MinHash signatures x 128.

    .venv/bin/python bench/bench_lsh.py                      # 250k, 500k, 1M
    .venv/bin/python bench/bench_lsh.py --sizes 100000       # quick run

Each size runs in its own process, so ``ru_maxrss`` (peak resident set of that process) is the
peak of that size alone. Per size:

* signatures: uint64 values < 2**32 (as datasketch's MinHash), random; 10% of the records in
  planted near-duplicate families of 2-8 members (each member keeps each value of the family
  base with probability s ~ U(0.6, 1.0)), scattered over the index; 0.05% of the records share
  their first two bands (a "template" hot bucket, to exercise the bucket cap);
* policy: ``LshPolicy(threshold=0.8, num_perm=128, bands=20, rows=5, bucket_cap=100)`` (the
  seed's b=20, r=5; the cap is part of the policy and the hot bucket of n/2000 records is
  above it at every size);
* phases timed: band keys + candidate pairs (``lsh_candidates``: band by band, a stable argsort
  per band, runs scanned, pairs unioned), verification (J estimated as signature agreement —
  the synthetic records have no text), Algorithm 18.1 (``select_representatives``), connected
  components;
* memory: the process's peak RSS (``ru_maxrss``: interpreter + imports + signatures + the
  pipeline), RSS once the signatures exist, and the pipeline's own working memory: the peak of
  the arrays it allocates, traced with ``tracemalloc`` (numpy reports its buffers to it) from
  the start of LSH to the end of the components, in a second run of the pipeline (so the
  timings come from an untraced run; the two runs' outputs are compared for equality).

The records are generated in their total order (index = rank), so ``order`` is the identity.
At the smallest size the run is repeated with the bands split over two "workers"
(``band_ranges``) and the outputs compared for equality.

Big clusters (issue 18): ``--big-clusters`` runs the same pipeline on 250k records (``--sizes``
first value) with 10 planted clusters of 200-1,500 members (each member keeps each value of the
cluster base with probability 0.9) against the same count without them, each case in its own
process, with the bucket cap of the policy (100) and without a cap, and with the current
sort + neighbour-mask dedup of pair codes ("new") and the former ``np.unique`` / ``np.union1d``
("old", patched in for the measurement). It prints CPU seconds and slowdown ratios
(clusters / no clusters), and old / new.

    .venv/bin/python bench/bench_lsh.py --big-clusters
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT))

GiB = 1 << 30
MiB = 1 << 20


def rss_now() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def rss_peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def make_signatures(n: int, m: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    sig = np.empty((n, m), dtype=np.uint64)
    chunk = 1 << 13  # small temporaries, so generation does not set the peak
    for s in range(0, n, chunk):
        sig[s : s + chunk] = rng.integers(0, 2**32, size=(min(chunk, n - s), m), dtype=np.uint64)
    # planted families: 10% of the records, sizes 2..8, scattered over the index
    target = n // 10
    sizes = []
    while sum(sizes) < target:
        sizes.append(int(rng.integers(2, 9)))
    members = rng.choice(n, size=sum(sizes), replace=False)
    fam_of = np.repeat(np.arange(len(sizes)), sizes)
    starts = np.cumsum(sizes) - sizes
    base_row = members[starts][fam_of]
    is_base = np.zeros(members.size, dtype=bool)
    is_base[starts] = True
    for s in range(0, members.size, chunk):
        sl = slice(s, s + chunk)
        rows, base, b = members[sl], base_row[sl], is_base[sl]
        keep_p = rng.uniform(0.6, 1.0, size=rows.size)
        keep = rng.random((rows.size, m)) < keep_p[:, None]
        keep[b] = False
        new = sig[rows]
        new[keep] = sig[base][keep]
        sig[rows[~b]] = new[~b]
    # template hot bucket: 0.05% of the records share their first 10 values (2 bands of 5)
    hot = rng.choice(np.setdiff1d(np.arange(n), members), size=max(2, n // 2000), replace=False)
    sig[hot, :10] = sig[hot[0], :10]
    families = [members[a : a + k] for a, k in zip(starts.tolist(), sizes)]
    return sig, families, hot


def run_one(n: int, m: int, seed: int, check_workers: bool) -> dict:
    rss0 = rss_now()
    import numpy as np

    from corpus_assets.domain.dedup.lsh import LshPolicy, lsh_candidates, merge_candidates
    from corpus_assets.domain.dedup.near import connected_components, select_representatives, signature_agreement

    rss_imports = rss_now()
    t = time.perf_counter()
    sig, families, hot = make_signatures(n, m, seed)
    gen_s = time.perf_counter() - t
    rss_sig = rss_now()
    policy = LshPolicy(threshold=0.8, num_perm=m, bands=20, rows=5, bucket_cap=100)
    b, r = policy.params()
    order = np.arange(n, dtype=np.int64)

    import tracemalloc

    def pipeline():
        times = {}
        t = time.perf_counter()
        pairs, stats = lsh_candidates(sig, b, r, policy.bucket_cap)
        times["lsh"] = time.perf_counter() - t
        t = time.perf_counter()
        jac = signature_agreement(sig, pairs)
        times["verify"] = time.perf_counter() - t
        t = time.perf_counter()
        rep, rep_j, edges, edge_j = select_representatives(order, pairs, jac, policy.threshold)
        times["alg18_1"] = time.perf_counter() - t
        t = time.perf_counter()
        comp = connected_components(n, edges)
        times["components"] = time.perf_counter() - t
        return times, (pairs, stats, rep, rep_j, edges, edge_j, comp)

    times, outputs = pipeline()  # timed, untraced
    pairs, stats, rep, rep_j, edges, edge_j, comp = outputs
    total_s = sum(times.values())
    tracemalloc.start()  # numpy reports its buffers to tracemalloc: peak of the pipeline's own arrays
    _, again = pipeline()  # traced run, for the working memory
    traced_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rerun_identical = all(np.array_equal(a, c) for a, c in zip(outputs, again) if isinstance(a, np.ndarray))
    del again
    peak = rss_peak()

    # planted recall: family pairs whose estimated J >= tau that became verified edges
    fam_pairs = np.array([(a, c) for f in families for i, a in enumerate(sorted(f)) for c in sorted(f)[i + 1 :]],
                         dtype=np.int64).reshape(-1, 2)
    fam_j = signature_agreement(sig, fam_pairs)
    want = fam_pairs[fam_j >= policy.threshold]
    e_sorted = np.sort(edges, axis=1)
    found = np.isin(want[:, 0] * n + want[:, 1], e_sorted[:, 0] * n + e_sorted[:, 1]).sum()
    comp_sizes = np.bincount(comp)
    out = {
        "n": n,
        "num_perm": m,
        "bands": b,
        "rows": r,
        "bucket_cap": policy.bucket_cap,
        "policy_version": policy.version(),
        "gen_s": round(gen_s, 2),
        **{f"{k}_s": round(v, 3) for k, v in times.items()},
        "total_s": round(total_s, 2),
        "rss_start_mib": round(rss0 / MiB, 1),
        "rss_imports_mib": round(rss_imports / MiB, 1),
        "rss_after_signatures_mib": round(rss_sig / MiB, 1),
        "peak_rss_mib": round(peak / MiB, 1),
        "working_mib": round(traced_peak / MiB, 1),
        "signatures_mib": round(sig.nbytes / MiB, 1),
        "candidates": int(pairs.shape[0]),
        "verified_edges": int(edges.shape[0]),
        "removed": int((rep != order).sum()),
        "groups_gt1": int((comp_sizes > 1).sum()),
        "largest_group": int(comp_sizes.max()),
        "planted_pairs_ge_tau": int(want.shape[0]),
        "planted_found": int(found),
        "stats": stats.as_dict(),
        "rerun_identical": bool(rerun_identical),
    }
    if check_workers:
        t = time.perf_counter()
        merged = merge_candidates(
            [lsh_candidates(sig, b, r, policy.bucket_cap, band_range=(b // 2, b)),
             lsh_candidates(sig, b, r, policy.bucket_cap, band_range=(0, b // 2))]
        )
        rep2, rep_j2, edges2, _ = select_representatives(order, merged[0], signature_agreement(sig, merged[0]),
                                                         policy.threshold)
        same = (np.array_equal(merged[0], pairs) and np.array_equal(rep2, rep) and np.array_equal(rep_j2, rep_j)
                and np.array_equal(edges2, edges) and np.array_equal(connected_components(n, edges2), comp))
        out["two_workers_identical"] = bool(same)
        out["two_workers_s"] = round(time.perf_counter() - t, 2)
    return out


def plant_big_clusters(sig, seed: int, count: int = 10, lo: int = 200, hi: int = 1500, keep: float = 0.9):
    """``count`` clusters of ``lo..hi`` members scattered over the index; each member keeps each
    value of its cluster's base row with probability ``keep``."""
    import numpy as np

    rng = np.random.default_rng(seed + 1)
    n, m = sig.shape
    sizes = rng.integers(lo, hi + 1, size=count)
    members = rng.choice(n, size=int(sizes.sum()), replace=False)
    out, at = [], 0
    for size in sizes.tolist():
        rows = np.sort(members[at:at + size])
        at += size
        base = sig[rows[0]].copy()
        same = rng.random((size - 1, m)) < keep
        block = sig[rows[1:]]
        block[same] = np.broadcast_to(base, block.shape)[same]
        sig[rows[1:]] = block
        out.append(rows)
    return out


def run_big(n: int, m: int, seed: int, clusters: bool, impl: str, cap) -> dict:
    import numpy as np

    from corpus_assets.domain.dedup import lsh as lshmod
    from corpus_assets.domain.dedup.lsh import LshPolicy, lsh_candidates
    from corpus_assets.domain.dedup.near import connected_components, select_representatives, signature_agreement

    if impl == "old":  # the np.unique / np.union1d dedup of lsh-1, patched in for the comparison
        lshmod.sorted_unique = np.unique
        lshmod.merge_sorted_unique = lambda a, b: b if a.size == 0 else (a if b.size == 0 else np.union1d(a, b))
    rng = np.random.default_rng(seed)
    sig = rng.integers(0, 2**32, size=(n, m), dtype=np.uint64)
    planted = plant_big_clusters(sig, seed) if clusters else []
    policy = LshPolicy(threshold=0.8, num_perm=m, bands=20, rows=5, bucket_cap=cap)
    b, r = policy.params()
    order = np.arange(n, dtype=np.int64)
    t0, c0 = time.perf_counter(), time.process_time()
    pairs, stats = lsh_candidates(sig, b, r, policy.bucket_cap)
    lsh_cpu = time.process_time() - c0
    jac = signature_agreement(sig, pairs)
    rep, rep_j, edges, edge_j = select_representatives(order, pairs, jac, policy.threshold)
    comp = connected_components(n, edges)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    # a cluster is whole when every member matching its base (J >= tau) is in the base's group
    whole = 0
    for p in planted:
        j_base = signature_agreement(sig, np.stack([np.full(p.size - 1, p[0]), p[1:]], axis=1))
        match = p[1:][j_base >= policy.threshold]
        whole += bool((comp[match] == comp[p[0]]).all())
    return {"n": n, "clusters": clusters, "impl": impl, "cap": cap, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
            "lsh_cpu_s": round(lsh_cpu, 2), "peak_rss_mib": round(rss_peak() / MiB, 1),
            "cluster_sizes": [len(p) for p in planted], "clusters_whole": whole, "candidates": int(pairs.shape[0]),
            "pair_emissions": stats.pair_emissions, "pivot_pairs": stats.pivot_pairs,
            "digest": __import__("hashlib").sha256(pairs.tobytes() + rep.tobytes() + comp.tobytes()).hexdigest()[:16]}


def big_clusters(n: int, m: int, seed: int) -> None:
    rows = {}
    for cap in (100, None):
        for impl in ("new", "old"):
            for clusters in (False, True):
                cmd = [sys.executable, __file__, "--big-one", str(n), "--num-perm", str(m), "--seed", str(seed),
                       "--impl", impl, "--cap", str(cap)] + (["--with-clusters"] if clusters else [])
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=PROJECT)
                if proc.returncode:
                    sys.stderr.write(proc.stderr)
                    raise SystemExit(f"case {cmd} failed")
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                print(json.dumps(res), file=sys.stderr)
                rows[(cap, impl, clusters)] = res
    print(f"\n{n:,} records x {m}, bands=20 rows=5; clusters: {rows[(100, 'new', True)]['cluster_sizes']}\n")
    print("| cap | dedup of pair codes | CPU s no clusters | CPU s 10 clusters | slowdown | LSH CPU s (clusters) "
          "| peak RSS MiB (clusters) | candidates | clusters whole (members J>=tau to the base in its group) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for cap in (100, None):
        for impl in ("new", "old"):
            a, c = rows[(cap, impl, False)], rows[(cap, impl, True)]
            label = "sort + mask" if impl == "new" else "np.unique / union1d"
            print(f"| {cap} | {label} | {a['cpu_s']:.2f} | {c['cpu_s']:.2f} | {c['cpu_s'] / a['cpu_s']:.2f}x "
                  f"| {c['lsh_cpu_s']:.2f} | {c['peak_rss_mib']:,.0f} | {c['candidates']:,} | {c['clusters_whole']}/10 |")
        new, old = rows[(cap, "new", True)], rows[(cap, "old", True)]
        print(f"cap {cap}: old/new CPU with clusters {old['cpu_s'] / new['cpu_s']:.1f}x; same output: "
              f"{new['digest'] == old['digest']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[250_000, 500_000, 1_000_000])
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--check-workers", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--big-clusters", action="store_true", help="the big-cluster case (see above)")
    ap.add_argument("--big-one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--impl", default="new", help=argparse.SUPPRESS)
    ap.add_argument("--cap", default="100", help=argparse.SUPPRESS)
    ap.add_argument("--with-clusters", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.big_one:
        cap = None if args.cap == "None" else int(args.cap)
        print(json.dumps(run_big(args.big_one, args.num_perm, args.seed, args.with_clusters, args.impl, cap)))
        return
    if args.big_clusters:
        big_clusters(args.sizes[0] if args.sizes != [250_000, 500_000, 1_000_000] else 250_000, args.num_perm, args.seed)
        return
    if args.one:
        print(json.dumps(run_one(args.one, args.num_perm, args.seed, args.check_workers)))
        return
    results = []
    for k, n in enumerate(args.sizes):
        cmd = [sys.executable, __file__, "--one", str(n), "--num-perm", str(args.num_perm), "--seed", str(args.seed)]
        if k == 0:
            cmd.append("--check-workers")
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=PROJECT)
        if proc.returncode:
            sys.stderr.write(proc.stderr)
            raise SystemExit(f"size {n} failed")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(res)
        print(json.dumps(res), file=sys.stderr)

    import numpy

    print(f"\nPython {platform.python_version()}, numpy {numpy.__version__}, {os.cpu_count()} CPUs, "
          f"policy bands={results[0]['bands']} rows={results[0]['rows']} cap={results[0]['bucket_cap']} "
          f"(version {results[0]['policy_version']})\n")
    print("| records | signatures MiB | LSH s | verify s | Alg. 18.1 s | components s | total s "
          "| RSS after signatures MiB | peak RSS MiB | pipeline working MiB (traced) | peak(2N)/peak(N) | working(2N)/working(N) "
          "| time(2N)/time(N) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    prev = None
    for res in results:
        ratio = lambda key: f"{res[key] / prev[key]:.2f}" if prev else "—"  # noqa: E731
        print(f"| {res['n']:,} | {res['signatures_mib']:,.0f} | {res['lsh_s']:.2f} | {res['verify_s']:.2f} "
              f"| {res['alg18_1_s']:.2f} | {res['components_s']:.2f} | {res['total_s']:.2f} "
              f"| {res['rss_after_signatures_mib']:,.0f} | {res['peak_rss_mib']:,.0f} | {res['working_mib']:,.0f} "
              f"| {ratio('peak_rss_mib')} | {ratio('working_mib')} | {ratio('total_s')} |")
        prev = res
    print("\n| records | candidates | verified edges | removed | groups > 1 | largest group | planted pairs J>=tau "
          "| found | buckets | multi | capped | pairs before cap | after cap | members beyond cap |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for res in results:
        st = res["stats"]
        print(f"| {res['n']:,} | {res['candidates']:,} | {res['verified_edges']:,} | {res['removed']:,} "
              f"| {res['groups_gt1']:,} | {res['largest_group']} | {res['planted_pairs_ge_tau']:,} "
              f"| {res['planted_found']:,} | {st['buckets']:,} | {st['multi_buckets']:,} | {st['capped_buckets']} "
              f"| {st['pairs_before_cap']:,} | {st['pair_emissions']:,} | {st['members_beyond_cap']:,} |")
    if "two_workers_identical" in results[0]:
        print(f"\n2 workers (bands split {results[0]['bands'] // 2}+{results[0]['bands'] - results[0]['bands'] // 2},"
              f" merged) at {results[0]['n']:,}: identical = {results[0]['two_workers_identical']}")
    print("rerun identical: " + ", ".join(f"{r['n']:,}: {r['rerun_identical']}" for r in results))
    worst = max(r["peak_rss_mib"] for r in results)
    print(f"largest peak RSS {worst:,.0f} MiB ({'under' if worst < 4096 else 'OVER'} 4 GiB)")


if __name__ == "__main__":
    main()
