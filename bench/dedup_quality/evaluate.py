"""Quality of near-duplicate detection on real license texts (issue 4).

Ground truth: exact Jaccard of the word 5-gram shingle sets (``minhash.shingle_set`` of
``hashing.dedup_normal_form(text, "prose")``, shingles as UTF-8 bytes) for ALL pairs, by brute
force (a sparse 0/1 document x shingle matrix times its transpose: every pair's intersection).

Pipeline under test, exactly as the release runs it (``domain/dedup/clusters_layer.py``):

1. exact dedup on the dedup key (``exact_dedup.exact_groups``), near dedup among the
   representatives only;
2. ``minhash.signatures`` with the project policy (128 perms, seed 1, xxh3_64_low32, affine32);
3. ``lsh.lsh_candidates`` (band by band, no bucket cap) for several (b, r);
4. verification by ``minhash.exact_jaccard`` of the *hashed* shingle sets (what the release
   verifies with) at tau, then Algorithm 18.1 (``near_dedup.near_dedup``).

Reported per (b, r): candidate pairs, candidate recall of the true pairs (J >= tau), precision
and recall of the final verified edges, records removed vs the brute-force Algorithm 18.1
(all true pairs as candidates), and per 0.05 similarity bin the measured candidate rate next to
the theoretical ``1 - (1 - s^r)^b`` (mean over the pairs of the bin of P(J_pair)). The curve is
also measured over ``--seeds`` MinHash seeds (the release uses seed 1 only) to separate the
banding law from one draw's noise.

    .venv/bin/python bench/dedup_quality/collect_licenses.py
    .venv/bin/python bench/dedup_quality/evaluate.py            # tables on stdout, JSON in bench/data/dedup_quality/
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent.parent
sys.path.insert(0, str(PROJECT))

from corpus_assets.domain.dedup import lsh as lshmod  # noqa: E402
from corpus_assets.domain.dedup.exact import exact_groups, exact_summary  # noqa: E402
from corpus_assets.domain.core.hashing import dedup_key, dedup_normal_form  # noqa: E402
from corpus_assets.domain.dedup.minhash import MinHashPolicy, hash_shingles, shingle_set, signatures  # noqa: E402
from corpus_assets.domain.dedup.near import near_dedup, select_representatives, stable_order  # noqa: E402

DATA = PROJECT / "bench" / "data" / "dedup_quality"
BIN = 0.05


def jaccard_matrix(sets: list) -> np.ndarray:
    """Exact Jaccard of every pair of sets (dense n x n float64); 0.0 when either set is empty
    (``minhash.exact_jaccard``'s declaration)."""
    vocab: dict = {}
    indptr, indices = [0], []
    for s in sets:
        for x in s:
            indices.append(vocab.setdefault(x, len(vocab)))
        indptr.append(len(indices))
    n = len(sets)
    X = sp.csr_matrix((np.ones(len(indices), dtype=np.int64), np.asarray(indices), np.asarray(indptr)), shape=(n, len(vocab)))
    inter = (X @ X.T).toarray().astype(np.float64)
    size = np.diag(inter).copy()
    union = size[:, None] + size[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        J = np.where((size[:, None] > 0) & (size[None, :] > 0), inter / union, 0.0)
    return J


def pair_codes(pairs: np.ndarray, n: int) -> np.ndarray:
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return np.unique(np.minimum(pairs[:, 0], pairs[:, 1]) * n + np.maximum(pairs[:, 0], pairs[:, 1]))


def bins_of(j: np.ndarray) -> np.ndarray:
    return np.minimum((j / BIN + 1e-9).astype(np.int64), int(round(1 / BIN)) - 1)


def datasketch_check(sig: np.ndarray, b: int, r: int, tau: float, n: int, ours: np.ndarray):
    """Load our seed-1 signatures into ``datasketch.MinHashLSH`` with the same (b, r) and compare
    its candidate pairs (query of every record) with ours. None if datasketch is not installed."""
    try:
        from datasketch import LeanMinHash, MinHash, MinHashLSH
    except ImportError:
        return None
    index = MinHashLSH(threshold=tau, num_perm=sig.shape[1], params=(b, r))
    mh = [LeanMinHash(MinHash(num_perm=sig.shape[1], seed=1, hashvalues=row, scheme="affine32")) for row in sig]
    for i, m in enumerate(mh):
        index.insert(i, m)
    pairs = [(i, j) for i, m in enumerate(mh) for j in index.query(m) if j != i]
    theirs = pair_codes(np.asarray(pairs, dtype=np.int64).reshape(-1, 2), n)
    return {"datasketch_candidates": int(theirs.size), "identical": bool(np.array_equal(theirs, ours))}


def evaluate(view: str, ids: list, normal: list, settings: list, tau: float, seeds: list, log, check_datasketch: bool = True) -> dict:
    n = len(ids)
    policy = MinHashPolicy()
    t0 = time.perf_counter()
    byte_sets = [set(shingle_set(t, policy.shingles)) for t in normal]
    hash_sets = [np.unique(hash_shingles(list(s), policy.hash_function)) if s else np.zeros(0, np.uint64) for s in byte_sets]
    J_true = jaccard_matrix(byte_sets)
    J_hash = jaccard_matrix([s.tolist() for s in hash_sets])
    iu, ju = np.triu_indices(n, k=1)
    jt, jh = J_true[iu, ju], J_hash[iu, ju]
    empty = np.array([not s for s in byte_sets])
    truth = (jt >= tau)
    truth_codes = iu[truth] * n + ju[truth]
    log(f"[{view}] n={n} pairs={iu.size} true pairs (J>={tau})={truth.sum()} brute force {time.perf_counter() - t0:.1f}s")

    order = stable_order([(i,) for i in ids])
    # brute-force Algorithm 18.1: every true pair is a candidate
    all_pairs = np.stack([iu, ju], axis=1)
    ideal_rep, _, ideal_edges, _ = select_representatives(order, all_pairs[jt >= tau], jt[jt >= tau], tau)
    ideal_removed = set(np.flatnonzero(ideal_rep != np.arange(n)).tolist())

    sigs_by_seed = {}
    for seed in seeds:
        sigs_by_seed[seed] = signatures(normal, policy.model_copy(update={"seed": seed}))
    sig = sigs_by_seed[policy.seed] if policy.seed in sigs_by_seed else signatures(normal, policy)
    bin_idx_h = bins_of(jh)
    nbins = int(round(1 / BIN))
    out = {
        "view": view,
        "records": n,
        "empty_shingle_sets": int(empty.sum()),
        "pairs": int(iu.size),
        "true_pairs": int(truth.sum()),
        "pairs_hash_vs_bytes_jaccard_differ": int((np.abs(jt - jh) > 1e-12).sum()),
        "pairs_truth_flipped_by_hashing": int(((jt >= tau) != (jh >= tau)).sum()),
        "pair_bins": [int((bin_idx_h == k).sum()) for k in range(nbins)],
        "ideal_removed": len(ideal_removed),
        "ideal_edges": int(ideal_edges.shape[0]),
        "settings": [],
    }

    def jaccard_many(p):
        p = np.asarray(p, dtype=np.int64).reshape(-1, 2)
        return J_hash[p[:, 0], p[:, 1]]

    for name, b, r in settings:
        t1 = time.perf_counter()
        lp = lshmod.LshPolicy(threshold=tau, num_perm=policy.num_perm, bands=b, rows=r)
        res = near_dedup(sig, order, lp, jaccard_many=jaccard_many)
        cand, _ = lshmod.lsh_candidates(sig, b, r, None, order=order)
        elapsed = time.perf_counter() - t1
        cand_codes = pair_codes(cand, n)
        edge_codes = pair_codes(res.edges, n)
        tp_c = np.intersect1d(cand_codes, truth_codes).size
        tp_e = np.intersect1d(edge_codes, truth_codes).size
        removed = set(np.flatnonzero(res.representative != np.arange(n)).tolist())
        # candidate rate per similarity bin, seed 1 and over all seeds
        is_cand = np.isin(iu * n + ju, cand_codes)
        rate_seeds = np.zeros(nbins)
        for seed, s in sigs_by_seed.items():
            c, _ = lshmod.lsh_candidates(s, b, r, None)
            cc = np.isin(iu * n + ju, pair_codes(c, n))
            rate_seeds += np.bincount(bin_idx_h, weights=cc, minlength=nbins)
        counts = np.bincount(bin_idx_h, minlength=nbins)
        theo = np.array([lshmod.candidate_probability(float(x), b, r) for x in np.clip(jh, 0, 1)])
        theo_bins = np.bincount(bin_idx_h, weights=theo, minlength=nbins)
        with np.errstate(invalid="ignore", divide="ignore"):
            rows = [
                {
                    "bin": [round(k * BIN, 2), round((k + 1) * BIN, 2)],
                    "pairs": int(counts[k]),
                    "measured_seed1": float(np.bincount(bin_idx_h, weights=is_cand, minlength=nbins)[k] / counts[k]) if counts[k] else None,
                    "measured_all_seeds": float(rate_seeds[k] / (counts[k] * len(sigs_by_seed))) if counts[k] else None,
                    "theory_mean": float(theo_bins[k] / counts[k]) if counts[k] else None,
                    "theory_mid": lshmod.candidate_probability((k + 0.5) * BIN, b, r),
                }
                for k in range(nbins)
            ]
        # per-seed candidate recall of the true pairs (spread of the recall over MinHash draws)
        seed_recalls = []
        for seed, s in sigs_by_seed.items():
            c, _ = lshmod.lsh_candidates(s, b, r, None)
            seed_recalls.append(np.intersect1d(pair_codes(c, n), truth_codes).size / max(1, truth_codes.size))
        missed = np.setdiff1d(truth_codes, edge_codes)
        ds = datasketch_check(sig, b, r, tau, n, cand_codes) if check_datasketch else None
        out["settings"].append(
            {
                "name": name,
                "bands": b,
                "rows": r,
                "p_at_tau": lshmod.candidate_probability(tau, b, r),
                "candidates": int(cand_codes.size),
                "candidates_true": int(tp_c),
                "candidate_recall": tp_c / max(1, truth_codes.size),
                "candidate_precision": tp_c / max(1, cand_codes.size),
                "edges": int(edge_codes.size),
                "edge_precision": tp_e / max(1, edge_codes.size),
                "edge_recall": tp_e / max(1, truth_codes.size),
                "expected_recall": float(np.mean([lshmod.candidate_probability(float(x), b, r) for x in jh[truth]])) if truth.any() else None,
                "candidate_recall_over_seeds": {"min": min(seed_recalls), "mean": float(np.mean(seed_recalls)), "max": max(seed_recalls), "seeds": len(seed_recalls)},
                "removed": len(removed),
                "removed_also_ideal": len(removed & ideal_removed),
                "ideal_removed_missed": len(ideal_removed - removed),
                "removed_not_ideal": len(removed - ideal_removed),
                # leakage groups: true pairs (J >= tau) whose records end up in different groups
                "true_pairs_split_across_groups": int((res.component[iu[truth]] != res.component[ju[truth]]).sum()),
                "missed_true_pairs_j": sorted(round(float(J_true[c // n, c % n]), 4) for c in missed),
                "datasketch_same_candidates": ds,
                "seconds": round(elapsed, 3),
                "bins": rows,
            }
        )
        log(f"[{view}] b={b} r={r}: {cand_codes.size} candidates, candidate recall {tp_c}/{truth_codes.size}")
    return out


def fmt(x, d=3):
    return "—" if x is None else f"{x:.{d}f}"


def markdown(res: dict, tau: float) -> str:
    L = []
    v = res
    L.append(f"### View: {v['view']} ({v['records']} records, {v['pairs']:,} pairs, {v['true_pairs']:,} true pairs J >= {tau})\n")
    L.append("| setting | b x r | P(cand) at tau | candidates | candidate recall | expected recall | recall over seeds (min/mean/max) | verified edges | edge precision | edge recall | max J of a missed pair | removed (ideal " + str(v["ideal_removed"]) + ") | ideal removals missed | true pairs split across leakage groups | datasketch same candidates |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in v["settings"]:
        rs = s["candidate_recall_over_seeds"]
        L.append(
            f"| {s['name']} | {s['bands']}x{s['rows']} | {s['p_at_tau']:.4f} | {s['candidates']:,} | "
            f"{s['candidates_true']:,}/{v['true_pairs']:,} = {s['candidate_recall']:.4f} | {fmt(s['expected_recall'], 4)} | "
            f"{rs['min']:.4f} / {rs['mean']:.4f} / {rs['max']:.4f} | {s['edges']:,} | {s['edge_precision']:.4f} | {s['edge_recall']:.4f} | "
            f"{max(s['missed_true_pairs_j']) if s['missed_true_pairs_j'] else '—'} | "
            f"{s['removed']} | {s['ideal_removed_missed']} | {s['true_pairs_split_across_groups']} | "
            f"{'—' if s['datasketch_same_candidates'] is None else ('yes' if s['datasketch_same_candidates']['identical'] else 'NO')} |"
        )
    L.append("")
    L.append("Candidate rate per similarity bin (J of the hashed shingle sets; measured = share of the bin's pairs that are LSH candidates; theory = mean of 1-(1-J^r)^b over the bin's pairs):\n")
    head = "| J bin | pairs | " + " | ".join(f"{s['bands']}x{s['rows']} seed 1 | {s['bands']}x{s['rows']} {s['candidate_recall_over_seeds']['seeds']} seeds | {s['bands']}x{s['rows']} theory" for s in v["settings"]) + " |"
    L.append(head)
    L.append("|---|---|" + "---|" * (3 * len(v["settings"])))
    for k, cnt in enumerate(v["pair_bins"]):
        lo, hi = k * BIN, (k + 1) * BIN
        cells = []
        for s in v["settings"]:
            row = s["bins"][k]
            cells += [fmt(row["measured_seed1"]), fmt(row["measured_all_seeds"]), fmt(row["theory_mean"])]
        L.append(f"| [{lo:.2f}, {hi:.2f}{']' if k == len(v['pair_bins']) - 1 else ')'} | {cnt:,} | " + " | ".join(cells) + " |")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DATA / "licenses.jsonl")
    ap.add_argument("--tau", type=float, default=0.8)
    ap.add_argument("--seeds", type=int, default=50, help="MinHash seeds 1..N for the measured curve (release: seed 1)")
    ap.add_argument("--json", type=Path, default=DATA / "results.json")
    ap.add_argument("--markdown", type=Path, default=DATA / "results.md")
    ap.add_argument("--views", default="distinct,all", help="distinct: after exact dedup (the release path); all: every record")
    args = ap.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731

    rows = [json.loads(line) for line in open(args.corpus, encoding="utf-8")]
    ids = [r["id"] for r in rows]
    normal = [dedup_normal_form(r["text"], "prose") for r in rows]
    order_keys = [(i,) for i in ids]
    groups = exact_groups([dedup_key(r["text"], "prose") for r in rows], lambda i: normal[i].encode("utf-8"), order_keys)
    ex = exact_summary(groups)
    ex["by_origin"] = {}
    for o in sorted({r["origin"] for r in rows}):
        members = [i for i, r in enumerate(rows) if r["origin"] == o]
        ex["by_origin"][o] = {"records": len(members), "removed_as_exact_duplicates": sum(1 for g in groups for m in g.duplicates if rows[m]["origin"] == o)}
    ex["largest_groups"] = [
        {"size": len(g.members), "representative": ids[g.representative]}
        for g in sorted(groups, key=lambda g: (-len(g.members), ids[g.representative]))[:8]
    ]
    ex["identical_raw_bytes_removed"] = len(rows) - len({r["sha256"] for r in rows})
    log(f"exact dedup: {ex}")

    b_opt, r_opt = lshmod.optimal_params(args.tau, 128)
    settings = [
        ("seed default", 20, 5),
        (f"datasketch optimal({args.tau})", b_opt, r_opt),
        ("16x8", 16, 8),
        ("32x4", 32, 4),
    ]
    reps = sorted(g.representative for g in groups)
    seeds = list(range(1, args.seeds + 1))
    results = {"corpus": str(args.corpus), "tau": args.tau, "num_perm": 128, "exact": ex, "views": []}
    md = []
    for view in args.views.split(","):
        idx = reps if view == "distinct" else list(range(len(rows)))
        res = evaluate(view, [ids[i] for i in idx], [normal[i] for i in idx], settings, args.tau, seeds, log)
        results["views"].append(res)
        md.append(markdown(res, args.tau))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1) + "\n")
    text = "\n".join(md)
    args.markdown.write_text(text)
    print(f"exact dedup: {json.dumps(ex)}\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
