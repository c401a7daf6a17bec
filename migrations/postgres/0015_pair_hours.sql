-- Interference's pair-hours (docs/analytics.md): per node, GPU and hour, what the hour's minute
-- rollups say of each victim–aggressor pair of tenants sharing the GPU. The analysis keeps them
-- here so that a later analysis adds up these sums instead of reading the minutes again. A
-- node-hour's mark records the thresholds they were measured with and the sample counts of the
-- node's hour rollups they came from: an hour whose rollups changed since (late samples), or
-- one read with other thresholds, is measured again from its minutes.
CREATE TABLE pair_hour_marks (
    cluster         text   NOT NULL,
    node            text   NOT NULL,
    bucket_ms       bigint NOT NULL,
    thresholds      text   NOT NULL,
    gpu_samples     bigint NOT NULL,
    tenant_samples  bigint NOT NULL,
    PRIMARY KEY (cluster, node, bucket_ms)
);
CREATE TABLE pair_hours (
    cluster          text             NOT NULL,
    node             text             NOT NULL,
    bucket_ms        bigint           NOT NULL,
    gpu_uuid         text             NOT NULL,
    victim           text             NOT NULL,
    aggressor        text             NOT NULL,
    alone_n          bigint           NOT NULL,
    alone_sum        double precision NOT NULL,
    contended_n      bigint           NOT NULL,
    contended_sum    double precision NOT NULL,
    contended_first  bigint           NOT NULL,
    contended_last   bigint           NOT NULL,
    PRIMARY KEY (cluster, node, bucket_ms, gpu_uuid, victim, aggressor)
);
