-- Duplicate audit per release (seed 003 checklist, "duplicate audit"): a cluster is every record
-- that shares one retained representative in dedup_clusters (exact duplicates: same normalized
-- text; near duplicates: MinHash LSH candidates verified by Jaccard >= tau, Algorithm 18.1).
-- section = 'size_distribution': per cluster size, how many clusters and records have that size and
--   how many of those records were removed as exact / near duplicates (size 1 = unique records).
-- section = 'largest': the 10 largest clusters (size > 1) with their retained representative, its
--   source, the members removed as exact / near duplicates, the lowest Jaccard of a member to the
--   representative and how many sources the cluster spans.
-- The representative is the first record in a stable order: governance-eligible first, then quality,
-- source priority, record id. Fragment (partial-document) duplicates are not detected by the
-- pipeline, so they do not show up here.
WITH clusters AS (
    SELECT
        release,
        representative_id,
        count(*) AS cluster_size,
        count(*) FILTER (WHERE kind = 'exact') AS exact_duplicates,
        count(*) FILTER (WHERE kind = 'near') AS near_duplicates,
        min(jaccard) AS min_jaccard,
        count(DISTINCT source_id) AS sources
    FROM {{ ref('dedup_clusters', 'clusters') }}
    GROUP BY release, representative_id
),
distribution AS (
    SELECT
        release,
        'size_distribution' AS section,
        cluster_size,
        count(*) AS clusters,
        sum(cluster_size) AS records,
        sum(exact_duplicates) AS exact_duplicates,
        sum(near_duplicates) AS near_duplicates
    FROM clusters
    GROUP BY release, cluster_size
),
largest AS (
    SELECT
        c.release,
        'largest' AS section,
        row_number() OVER (PARTITION BY c.release ORDER BY c.cluster_size DESC, c.representative_id) AS rank,
        c.cluster_size,
        1 AS clusters,
        c.cluster_size AS records,
        c.exact_duplicates,
        c.near_duplicates,
        c.representative_id,
        r.source_id AS representative_source,
        round(c.min_jaccard, 4) AS min_jaccard,
        c.sources
    FROM clusters AS c
    LEFT JOIN {{ ref('dedup_clusters', 'clusters') }} AS r
        ON r.release = c.release AND r.record_id = c.representative_id
    WHERE c.cluster_size > 1
    QUALIFY rank <= 10
)
SELECT
    release, section, rank, cluster_size, clusters, records, exact_duplicates, near_duplicates,
    representative_id, representative_source, min_jaccard, sources
FROM (SELECT * FROM distribution UNION ALL BY NAME SELECT * FROM largest)
ORDER BY release, section DESC, rank NULLS FIRST, cluster_size
