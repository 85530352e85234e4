-- Decisions by reason code, per layer and source, over the current version of every partition: what
-- each stage (and sub-stage: quality, decontam, pii ...) decided, how often and at what cost in
-- characters and tokens. Snapshot layers are keyed by snapshot, release layers by release.
SELECT
    layer,
    step,
    partitioning,
    source_id,
    stage,
    outcome,
    action,
    reason,
    count(*) AS decisions,
    count(DISTINCT partition) AS partitions,
    sum(chars_in) AS chars_in,
    sum(chars_out) AS chars_out,
    sum(tokens_in) AS tokens_in,
    sum(tokens_out) AS tokens_out
FROM {{ decisions() }}
GROUP BY ALL
ORDER BY step, source_id, stage, outcome, decisions DESC, reason
