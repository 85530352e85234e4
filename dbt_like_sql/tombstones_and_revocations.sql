-- Deletion lineage (seed 003 checklist, "replay and deletion": trace a source forward to every
-- derived artifact and the training runs that used it), from the control-plane catalog: ids,
-- statuses, counts and times only, never a requester, a reason, a request's target or any text.
-- section = 'deletion_requests': requests per kind (record | uri | source | content) and status
--   (received -> resolved -> runs_requested -> applied, or rejected); near_duplicates = how many
--   of them also cover near duplicates.
-- section = 'tombstones': per tombstone generation and scope (record = withdrawal; content =
--   takedown, whose digest also refuses later re-captures): tombstone rows, distinct record ids
--   and the requests that wrote them. Generations only grow.
-- section = 'revoked_releases': each revoked release version, its successor build (null: none yet),
--   the deletion requests that revoked it, the affected training runs (runs recorded as consumers
--   united with runs named at revocation) and the consumers recorded for that build.
-- No rows in a section means nothing of that kind happened yet (e.g. no deletion request filed).
WITH requests AS (
    SELECT
        'deletion_requests' AS section,
        kind,
        status,
        count(*) AS requests,
        count(*) FILTER (WHERE near_duplicates) AS near_duplicates,
        max(updated_at) AS last_at
    FROM {{ catalog('deletion_requests') }}
    GROUP BY kind, status
),
tombs AS (
    SELECT
        'tombstones' AS section,
        generation,
        scope,
        count(DISTINCT request_id) AS requests,
        count(*) AS tombstones,
        count(DISTINCT record_id) FILTER (WHERE record_id <> '') AS record_ids,
        max(created_at) AS last_at
    FROM {{ catalog('tombstones') }}
    GROUP BY generation, scope
),
revoked AS (
    SELECT
        'revoked_releases' AS section,
        r.release,
        r.build_id,
        r.status,
        r.successor_build_id,
        r.revocation_requests AS requests,
        r.affected_runs,
        count(c.run_id) AS consumers,
        r.revoked_at AS last_at
    FROM {{ catalog('release_registry') }} AS r
    LEFT JOIN {{ catalog('consumption') }} AS c ON c.release = r.release AND c.build_id = r.build_id
    WHERE r.status = 'revoked'
    GROUP BY ALL
)
SELECT
    section, kind, status, generation, scope, release, build_id, successor_build_id,
    requests, near_duplicates, tombstones, record_ids, affected_runs, consumers, last_at
FROM (SELECT * FROM requests UNION ALL BY NAME SELECT * FROM tombs UNION ALL BY NAME SELECT * FROM revoked)
ORDER BY CASE section WHEN 'deletion_requests' THEN 0 WHEN 'tombstones' THEN 1 ELSE 2 END,
    kind, status, generation, scope, release, build_id
