-- Hour rollups per cluster: every GPU of the cluster merged, so fleet-wide pages over months
-- read one row per hour instead of one per GPU-hour. Recomputed from gpu_rollup_1h by the
-- rollup job for each (cluster, hour) it touches. Small (8,760 rows a year per cluster), so
-- not partitioned; keyed by cluster alone (a Citus reference-style table).
CREATE TABLE cluster_rollup_1h (
    cluster           text             NOT NULL,
    bucket            timestamptz      NOT NULL,
    gpus              integer          NOT NULL,
    samples           integer          NOT NULL,
    covered_s         double precision NOT NULL,
    gpu_util_n        integer          NOT NULL,
    gpu_util_sum      double precision NOT NULL,
    gpu_util_max      real,
    gpu_util_hist     bytea,
    busy_n            integer          NOT NULL,
    sm_active_n       integer          NOT NULL,
    sm_active_sum     double precision NOT NULL,
    sm_active_max     real,
    sm_active_hist    bytea,
    sm_occupancy_sum  double precision NOT NULL,
    tensor_active_sum double precision NOT NULL,
    dram_active_sum   double precision NOT NULL,
    mem_used_n        integer          NOT NULL,
    mem_used_sum      double precision NOT NULL,
    mem_used_max      bigint,
    mem_total_max     bigint,
    power_n           integer          NOT NULL,
    power_sum         double precision NOT NULL,
    power_max         real,
    temp_n            integer          NOT NULL,
    temp_sum          double precision NOT NULL,
    temp_max          real,
    throttled_n       integer          NOT NULL,
    alloc_share_sum   double precision NOT NULL,
    PRIMARY KEY (cluster, bucket)
);
