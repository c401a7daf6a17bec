-- Interference's pair-hours (docs/analytics.md): per node, GPU and hour, what the hour's minute
-- rollups say of each victim–aggressor pair of tenants sharing the GPU. The analysis keeps them
-- here so that a later analysis adds up these sums instead of reading the minutes again. A
-- node-hour's mark records the thresholds they were measured with and the sample counts of the
-- node's hour rollups they came from: an hour whose rollups changed since (late samples), or
-- one read with other thresholds, is measured again from its minutes.
CREATE TABLE pair_hour_marks (
    cluster         text   NOT NULL,
    node            text   NOT NULL,
    bucket_ms       integer NOT NULL,
    thresholds      text   NOT NULL,
    gpu_samples     integer NOT NULL,
    tenant_samples  integer NOT NULL,
    PRIMARY KEY (cluster, node, bucket_ms)
);
CREATE TABLE pair_hours (
    cluster          text             NOT NULL,
    node             text             NOT NULL,
    bucket_ms        integer           NOT NULL,
    gpu_uuid         text             NOT NULL,
    victim           text             NOT NULL,
    aggressor        text             NOT NULL,
    alone_n          integer           NOT NULL,
    alone_sum        real             NOT NULL,
    contended_n      integer           NOT NULL,
    contended_sum    real             NOT NULL,
    contended_first  integer           NOT NULL,
    contended_last   integer           NOT NULL,
    PRIMARY KEY (cluster, node, bucket_ms, gpu_uuid, victim, aggressor)
);
