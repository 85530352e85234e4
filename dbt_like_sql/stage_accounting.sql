-- Stage accounting per release (seed 003 checklist, "stage accounting"): one row per stage, from the
-- raw items its snapshots captured to the tokens its shards hold, counted from the one decision
-- record every stage writes (corpus_assets/domain/layers/decisions.py).
-- records_in = accepted + rejected + quarantined + deleted in every row; modified = accepted units a
-- stage changed (redacted, masked, truncated, split, cut by the tail). The unit is the stage's input:
-- raw items (canonical_records), records (curated_records ... mixture_plan), packing samples
-- (packed_shards: a record drawn twice by the mixture is two samples). Each stage's accepted records
-- are the next stage's input; mixture_plan's tokens_out (packable tokens x draws) are packed_shards'
-- tokens_in, and packed_shards' tokens_out are the view tokens in the shards. Snapshot stages count
-- the snapshots the release's dedup_clusters selected. A figure a stage does not measure is null
-- (characters after token views, tokens before them).
WITH d AS (
    SELECT * FROM {{ decisions() }}
),
release_snapshots AS (
    SELECT m.release, s.value ->> '$' AS snapshot
    FROM {{ ref('dedup_clusters', 'manifest') }} AS m, json_each(m.build_spec_json, '$.snapshots') AS s
),
scoped AS (
    SELECT r.release, d.* EXCLUDE (release)
    FROM d JOIN release_snapshots AS r ON d.partitioning = 'snapshots' AND d.partition = r.snapshot
    UNION ALL BY NAME
    SELECT * FROM d WHERE d.partitioning = 'releases'
)
SELECT
    release,
    step,
    layer,
    count(*) AS records_in,
    count(*) FILTER (WHERE outcome = 'accepted') AS accepted,
    count(*) FILTER (WHERE action = 'modify') AS modified,
    count(*) FILTER (WHERE outcome = 'rejected') AS rejected,
    count(*) FILTER (WHERE outcome = 'quarantined') AS quarantined,
    count(*) FILTER (WHERE outcome = 'deleted') AS deleted,
    sum(chars_in) AS chars_in,
    sum(chars_out) AS chars_out,
    sum(tokens_in) AS tokens_in,
    sum(tokens_out) AS tokens_out
FROM scoped
GROUP BY release, step, layer
ORDER BY release, step
