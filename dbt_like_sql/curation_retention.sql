-- Curation retention per source x language x stage x reason, with declared denominators:
-- records and characters before (canonical records entering curation) and after (curated records).
SELECT
    source_id,
    lang,
    stage,
    outcome,
    reason,
    count(*) AS records_in,
    count(*) FILTER (WHERE outcome = 'accepted') AS records_out,
    sum(chars_in) AS chars_in,
    sum(chars_out) AS chars_out,
    round(sum(chars_out) / nullif(sum(chars_in), 0), 4) AS char_retention
FROM {{ ref('curated_records', 'decisions') }}
GROUP BY ALL
ORDER BY source_id, lang, stage, outcome, records_in DESC, reason
