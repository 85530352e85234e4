-- Mixture realized vs target per release and source (seed 003 checklist, "sampler test": verify the
-- realized weights and effective epochs before training; the four quantities are kept apart).
-- target_share: the plan's target p in its unit (explicit weights or temperature alpha, budget-weighted
-- over curriculum phases); realized_document_share / realized_token_share: recomputed here from the
-- plan's draws; gap = realized share in the plan's unit - target; effective_epochs = sampled /
-- available units of the source (over_epoch_limit flags e > epoch_limit); importance_weight = q / p
-- when the spec has target_weights, else null. Only the training split is mixed: validation and test
-- keep their natural distribution and do not appear here.
WITH draws AS (
    SELECT release, source, count(*) AS draws, sum(n_tokens) AS tokens, count(DISTINCT record_id) AS unique_records
    FROM {{ ref('mixture_plan', 'plan') }}
    GROUP BY release, source
),
totals AS (
    SELECT release, sum(draws) AS all_draws, sum(tokens) AS all_tokens
    FROM draws
    GROUP BY release
),
realized AS (
    SELECT
        s.*,
        coalesce(d.draws, 0) AS realized_draws,
        coalesce(d.tokens, 0) AS realized_tokens,
        coalesce(d.unique_records, 0) AS realized_unique_records,
        coalesce(d.draws, 0) / nullif(t.all_draws, 0) AS doc_share,
        coalesce(d.tokens, 0) / nullif(t.all_tokens, 0) AS tok_share
    FROM {{ ref('mixture_plan', 'sources') }} AS s
    LEFT JOIN draws AS d USING (release, source)
    LEFT JOIN totals AS t USING (release)
)
SELECT
    release,
    source,
    unit,
    round(target_share, 4) AS target_share,
    round(doc_share, 4) AS realized_document_share,
    round(tok_share, 4) AS realized_token_share,
    round(CASE unit WHEN 'documents' THEN doc_share ELSE tok_share END - target_share, 4) AS gap,
    realized_draws AS draws,
    realized_tokens AS tokens,
    realized_unique_records AS unique_records,
    available_records,
    available_tokens,
    round(effective_epochs, 4) AS effective_epochs,
    effective_epochs > epoch_limit AS over_epoch_limit,
    round(importance_weight, 4) AS importance_weight
FROM realized
ORDER BY release, source
