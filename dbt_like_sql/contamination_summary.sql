-- Contamination per benchmark, source and action under the configured method (n-gram containment
-- from the benchmark side, plus the long n-gram rule for long protected texts), with what the
-- method could not check. Every benchmark of the registry has a row, flagged or not:
-- protected_texts / checked_texts / unchecked_too_short (fewer than short_n tokens) /
-- unchecked_all_suppressed (only too-common or benchmark-template n-grams) come from the curated
-- manifests ('$.decontam.coverage'; the largest count over the snapshots, should their policies
-- differ). Matches in records another stage rejected first are counted too, with action 'none' and
-- decided_by = that stage (e.g. 'quality'); rows written before decided_by existed read as decontam.
-- records_flagged = 0 means no matches were found by this method, not that the data is clean.
WITH coverage AS (
    SELECT
        b.key AS benchmark,
        max(CAST(b.value ->> 'protected' AS BIGINT)) AS protected_texts,
        max(CAST(b.value ->> 'checked' AS BIGINT)) AS checked_texts,
        max(CAST(b.value ->> 'too_short' AS BIGINT)) AS unchecked_too_short,
        max(CAST(b.value ->> 'all_ngrams_suppressed' AS BIGINT)) AS unchecked_all_suppressed
    FROM {{ ref('curated_records', 'manifest') }} AS m, json_each(m.extra_json, '$.decontam.coverage') AS b
    GROUP BY b.key
),
matches AS (
    SELECT
        benchmark,
        source_id,
        action,
        coalesce(decided_by, 'decontam') AS decided_by,
        count(DISTINCT record_id) AS records_flagged,
        count(DISTINCT record_id) FILTER (WHERE rule = 'long_ngram') AS records_long_ngram_rule,
        count(DISTINCT item_id) AS items_matched,
        round(avg(containment), 4) AS mean_containment,
        round(min(containment), 4) AS min_containment
    FROM {{ ref('curated_records', 'contamination') }}
    GROUP BY ALL
)
SELECT
    coalesce(x.benchmark, c.benchmark) AS benchmark,
    x.source_id,
    x.action,
    x.decided_by,
    coalesce(x.records_flagged, 0) AS records_flagged,
    coalesce(x.records_long_ngram_rule, 0) AS records_long_ngram_rule,
    coalesce(x.items_matched, 0) AS items_matched,
    x.mean_containment,
    x.min_containment,
    c.protected_texts,
    c.checked_texts,
    c.unchecked_too_short,
    c.unchecked_all_suppressed
FROM matches AS x
FULL OUTER JOIN coverage AS c ON c.benchmark = x.benchmark
ORDER BY benchmark, records_flagged = 0, source_id, action, decided_by
