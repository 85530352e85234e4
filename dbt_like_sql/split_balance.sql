-- Split balance per release and split (seed 003 checklist, "sampler test": realized weights before
-- training; splits are assigned per leakage group, so no group straddles two splits).
-- records: every record assigned to the split, duplicates included (the unit the split policy
-- balances); kept_records: cluster representatives, what training reads; groups: leakage groups;
-- views / tokens / label_tokens: the token views of the kept records (joined on record id;
-- label_tokens = tokens with loss); target: the split policy's fraction (from the splits manifest);
-- record_share / token_share: realized shares over the assigned records / all view tokens of the
-- release; record_drift = record_share - target. The '(quarantined)' row counts records whose group
-- conflicted with an earlier assignment: they have no split and no share.
WITH assigned AS (
    SELECT release, record_id, kept, group_key, coalesce(split, '(quarantined)') AS split
    FROM {{ ref('splits', 'assignments') }}
),
tokens AS (
    SELECT release, record_id, count(*) AS views, sum(n_tokens) AS tokens, sum(label_tokens) AS label_tokens
    FROM {{ ref('token_views', 'views') }}
    GROUP BY release, record_id
),
targets AS (
    SELECT m.release, s.key AS split, CAST(s.value ->> 'target' AS DOUBLE) AS target
    FROM {{ ref('splits', 'manifest') }} AS m, json_each(m.extra_json, '$.report.splits') AS s
),
per_split AS (
    SELECT
        a.release,
        a.split,
        count(*) AS records,
        count(*) FILTER (WHERE a.kept) AS kept_records,
        count(DISTINCT a.group_key) AS groups,
        coalesce(sum(t.views), 0) AS views,
        coalesce(sum(t.tokens), 0) AS tokens,
        coalesce(sum(t.label_tokens), 0) AS label_tokens
    FROM assigned AS a
    LEFT JOIN tokens AS t ON t.release = a.release AND t.record_id = a.record_id
    GROUP BY a.release, a.split
),
joined AS (
    SELECT
        release,
        split,
        coalesce(records, 0) AS records,
        coalesce(kept_records, 0) AS kept_records,
        coalesce(groups, 0) AS groups,
        coalesce(views, 0) AS views,
        coalesce(tokens, 0) AS tokens,
        coalesce(label_tokens, 0) AS label_tokens,
        target
    FROM per_split FULL OUTER JOIN targets USING (release, split)
)
SELECT
    release,
    split,
    records,
    kept_records,
    groups,
    views,
    tokens,
    label_tokens,
    round(target, 4) AS target,
    CASE WHEN split <> '(quarantined)' THEN
        round(records / nullif(sum(records) FILTER (WHERE split <> '(quarantined)') OVER (PARTITION BY release), 0), 4)
    END AS record_share,
    CASE WHEN split <> '(quarantined)' THEN
        round(tokens / nullif(sum(tokens) OVER (PARTITION BY release), 0), 4)
    END AS token_share,
    CASE WHEN split <> '(quarantined)' THEN
        round(records / nullif(sum(records) FILTER (WHERE split <> '(quarantined)') OVER (PARTITION BY release), 0) - target, 4)
    END AS record_drift,
    round(label_tokens / nullif(tokens, 0), 4) AS label_token_rate
FROM joined
ORDER BY release, split = '(quarantined)', target DESC NULLS LAST, split
