-- What each team held and used of each pool, hour by hour: the tenants' hour rollups summed by
-- cluster, GPU model and team in GPU-hours (the demand forecast's history, docs/analytics.md
-- "Demand forecast"). Re-summed by the rollup job for each (cluster, hour) it touches, as
-- cluster_rollup_1h is; small (pools × teams × hours), so a forecast over weeks reads it
-- instead of every tenant-hour. The hours rolled up before this migration are summed here.
CREATE TABLE use_rollup_1h (
    cluster    text             NOT NULL,
    model      text             NOT NULL,
    team       text,
    bucket     integer          NOT NULL,
    allocated  double precision NOT NULL,
    used       double precision NOT NULL
);
CREATE INDEX use_rollup_1h_cluster_bucket ON use_rollup_1h (cluster, bucket);
CREATE INDEX use_rollup_1h_bucket ON use_rollup_1h (bucket);

INSERT INTO use_rollup_1h (cluster, model, team, bucket, allocated, used)
SELECT r.cluster, g.model, t.team, r.bucket,
       sum(r.alloc_share_sum / (CASE WHEN r.samples > 0 THEN r.samples ELSE 1 END) * r.covered_s) / 3600.0,
       sum(r.eff_sum / (CASE WHEN r.samples > 0 THEN r.samples ELSE 1 END) * r.covered_s) / 3600.0
FROM tenant_rollup_1h r
JOIN gpus g ON g.cluster = r.cluster AND g.node = r.node AND g.gpu_uuid = r.gpu_uuid
LEFT JOIN tenants t ON t.cluster = r.cluster AND t.node = r.node AND t.tenant_key = r.tenant_key
GROUP BY r.cluster, g.model, t.team, r.bucket;
