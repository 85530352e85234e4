-- Stage accounting of canonical_records: items per source, stage, outcome and reason code,
-- over the current version of every snapshot partition.
SELECT
    source_id,
    stage,
    outcome,
    reason,
    count(*) AS items,
    count(DISTINCT snapshot) AS snapshots
FROM {{ ref('canonical_records', 'decisions') }}
GROUP BY ALL
ORDER BY source_id, stage, outcome, items DESC, reason
