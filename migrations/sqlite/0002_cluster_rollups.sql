-- Hour rollups per cluster: every GPU of the cluster merged, so fleet-wide pages over months
-- read one row per hour instead of one per GPU-hour. Recomputed from gpu_rollup_1h by the
-- rollup job for each (cluster, hour) it touches. Small (8,760 rows a year per cluster), so
-- keyed by cluster alone.
CREATE TABLE cluster_rollup_1h (
    cluster           text             NOT NULL,
    bucket            integer          NOT NULL,
    gpus              integer          NOT NULL,
    samples           integer          NOT NULL,
    covered_s         real             NOT NULL,
    gpu_util_n        integer          NOT NULL,
    gpu_util_sum      real             NOT NULL,
    gpu_util_max      real,
    gpu_util_hist     blob ,
    busy_n            integer          NOT NULL,
    sm_active_n       integer          NOT NULL,
    sm_active_sum     real             NOT NULL,
    sm_active_max     real,
    sm_active_hist    blob ,
    sm_occupancy_sum  real             NOT NULL,
    tensor_active_sum real             NOT NULL,
    dram_active_sum   real             NOT NULL,
    mem_used_n        integer          NOT NULL,
    mem_used_sum      real             NOT NULL,
    mem_used_max      bigint,
    mem_total_max     bigint,
    power_n           integer          NOT NULL,
    power_sum         real             NOT NULL,
    power_max         real,
    temp_n            integer          NOT NULL,
    temp_sum          real             NOT NULL,
    temp_max          real,
    throttled_n       integer          NOT NULL,
    alloc_share_sum   real             NOT NULL,
    PRIMARY KEY (cluster, bucket)
);
