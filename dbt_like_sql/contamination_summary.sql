-- Contamination matches per benchmark and source under the configured method (n-gram containment
-- from the benchmark side). No rows means no matches were found by this method, not that the data is clean.
SELECT
    benchmark,
    source_id,
    action,
    count(DISTINCT record_id) AS records_flagged,
    count(DISTINCT item_id) AS items_matched,
    round(avg(containment), 4) AS mean_containment,
    round(min(containment), 4) AS min_containment
FROM {{ ref('curated_records', 'contamination') }}
GROUP BY ALL
ORDER BY benchmark, source_id, action
