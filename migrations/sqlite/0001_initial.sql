-- gpulens schema, SQLite (the embedded default). Applied by `gpulens migrate` (and at collector start).
-- Never edit an applied migration: add a new file.
--
-- Same logical tables as migrations/postgres; timestamps are INTEGER milliseconds since the
-- epoch (UTC), histograms are BLOBs, and retention deletes rows instead of dropping partitions.

CREATE TABLE agent_streams (
    cluster     text        NOT NULL,
    node        text        NOT NULL,
    agent_id    text        NOT NULL,
    last_seq    bigint      NOT NULL,
    last_seen   integer     NOT NULL,
    PRIMARY KEY (cluster, node, agent_id)
);

CREATE TABLE nodes (
    cluster        text        NOT NULL,
    node           text        NOT NULL,
    agent_version  text,
    interval_ms    integer     NOT NULL,
    first_seen     integer     NOT NULL,
    last_seen      integer     NOT NULL,
    last_sample    integer    ,
    PRIMARY KEY (cluster, node)
);

CREATE TABLE gpus (
    cluster            text        NOT NULL,
    node               text        NOT NULL,
    gpu_uuid           text        NOT NULL,
    gpu_index          integer     NOT NULL,
    model              text        NOT NULL,
    memory_total_bytes bigint      NOT NULL,
    pci_bus_id         text,
    mig_enabled        integer     NOT NULL,
    sharing            text        NOT NULL,
    replicas           integer     NOT NULL,
    first_seen         integer     NOT NULL,
    last_seen          integer     NOT NULL,
    PRIMARY KEY (cluster, node, gpu_uuid)
);

CREATE TABLE mig_instances (
    cluster            text        NOT NULL,
    node               text        NOT NULL,
    gpu_uuid           text        NOT NULL,
    gi_id              integer     NOT NULL,
    ci_id              integer     NOT NULL,
    profile            text        NOT NULL,
    placement_start    integer,
    placement_size     integer,
    memory_total_bytes bigint      NOT NULL,
    compute_slices     integer,
    mig_uuid           text,
    last_seen          integer     NOT NULL,
    PRIMARY KEY (cluster, node, gpu_uuid, gi_id, ci_id)
);

CREATE TABLE tenants (
    cluster     text        NOT NULL,
    node        text        NOT NULL,
    tenant_key  text        NOT NULL,
    kind        text        NOT NULL,
    namespace   text,
    pod         text,
    container   text,
    pod_uid     text,
    job_id      text,
    username    text,
    account     text,
    uid         integer,
    team        text,
    first_seen  integer     NOT NULL,
    last_seen   integer     NOT NULL,
    PRIMARY KEY (cluster, node, tenant_key)
);

-- Raw samples. Append-only; a batch is stored at most once thanks to agent_streams.last_seq,
-- so there is no unique constraint to pay for on every row.
CREATE TABLE gpu_samples (
    cluster            text        NOT NULL,
    node               text        NOT NULL,
    gpu_uuid           text        NOT NULL,
    ts                 integer     NOT NULL,
    interval_ms        integer     NOT NULL,
    gpu_util           real,
    mem_util           real,
    mem_used_bytes     bigint,
    mem_total_bytes    bigint,
    power_w            real,
    energy_j           real            ,
    temp_c             real,
    sm_clock_mhz       integer,
    mem_clock_mhz      integer,
    throttle_reasons   bigint,
    pcie_rx_bytes_per_s   bigint,
    pcie_tx_bytes_per_s   bigint,
    nvlink_rx_bytes_per_s bigint,
    nvlink_tx_bytes_per_s bigint,
    ecc_corrected      bigint,
    ecc_uncorrected    bigint,
    retired_pages      integer,
    remapped_rows      integer,
    enc_util           real,
    dec_util           real,
    sm_active          real,
    sm_occupancy       real,
    dram_active        real,
    tensor_active      real,
    gr_engine_active   real
);
CREATE INDEX gpu_samples_gpu_ts ON gpu_samples (gpu_uuid, ts);
CREATE INDEX gpu_samples_ts ON gpu_samples (ts);

CREATE TABLE mig_samples (
    cluster          text        NOT NULL,
    node             text        NOT NULL,
    gpu_uuid         text        NOT NULL,
    gi_id            integer     NOT NULL,
    ci_id            integer     NOT NULL,
    ts               integer     NOT NULL,
    mem_used_bytes   bigint,
    mem_total_bytes  bigint,
    sm_active        real,
    sm_occupancy     real,
    dram_active      real,
    tensor_active    real,
    gr_engine_active real
);
CREATE INDEX mig_samples_gpu_ts ON mig_samples (gpu_uuid, ts);

CREATE TABLE process_samples (
    cluster         text        NOT NULL,
    node            text        NOT NULL,
    gpu_uuid        text        NOT NULL,
    ts              integer     NOT NULL,
    pid             bigint      NOT NULL,
    start_time      integer     NOT NULL,
    kind            text        NOT NULL,
    gi_id           integer,
    ci_id           integer,
    tenant_key      text,
    sm_util         real,
    mem_util        real,
    enc_util        real,
    dec_util        real,
    mem_used_bytes  bigint
);
CREATE INDEX process_samples_gpu_ts ON process_samples (gpu_uuid, ts);
CREATE INDEX process_samples_ts ON process_samples (ts);

CREATE TABLE allocation_samples (
    cluster     text        NOT NULL,
    node        text        NOT NULL,
    gpu_uuid    text        NOT NULL,
    ts          integer     NOT NULL,
    tenant_key  text        NOT NULL,
    gi_id       integer,
    ci_id       integer,
    replica     integer,
    share       real        NOT NULL
);
CREATE INDEX allocation_samples_gpu_ts ON allocation_samples (gpu_uuid, ts);

CREATE TABLE gpu_events (
    cluster   text        NOT NULL,
    node      text        NOT NULL,
    gpu_uuid  text        NOT NULL,
    ts        integer     NOT NULL,
    kind      text        NOT NULL,
    code      bigint      NOT NULL,
    message   text
);
CREATE INDEX gpu_events_gpu_ts ON gpu_events (gpu_uuid, ts);

-- Minutes that received raw data since their rollup was last computed.
CREATE TABLE rollup_pending (
    cluster  text        NOT NULL,
    node     text        NOT NULL,
    bucket   integer     NOT NULL,
    PRIMARY KEY (cluster, node, bucket)
);

-- Rollups: per GPU and per (GPU, tenant) per bucket. Sums and counts merge exactly across
-- resolutions; *_hist columns are 20-bin histograms (bins of 0.05) for quantiles.
CREATE TABLE gpu_rollup_1m (
    cluster           text             NOT NULL,
    node              text             NOT NULL,
    gpu_uuid          text             NOT NULL,
    bucket            integer          NOT NULL,
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
    PRIMARY KEY (cluster, node, gpu_uuid, bucket)
);

CREATE TABLE gpu_rollup_1h (
    cluster           text             NOT NULL,
    node              text             NOT NULL,
    gpu_uuid          text             NOT NULL,
    bucket            integer          NOT NULL,
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
    PRIMARY KEY (cluster, node, gpu_uuid, bucket)
);

CREATE TABLE tenant_rollup_1m (
    cluster          text             NOT NULL,
    node             text             NOT NULL,
    gpu_uuid         text             NOT NULL,
    tenant_key       text             NOT NULL,
    bucket           integer          NOT NULL,
    samples          integer          NOT NULL,
    covered_s        real             NOT NULL,
    alloc_share_sum  real             NOT NULL,
    alloc_n          integer          NOT NULL,
    present_n        integer          NOT NULL,
    sm_util_n        integer          NOT NULL,
    sm_util_sum      real             NOT NULL,
    sm_util_max      real,
    busy_n           integer          NOT NULL,
    mem_used_n       integer          NOT NULL,
    mem_used_sum     real             NOT NULL,
    mem_used_max     bigint,
    processes_max    integer          NOT NULL,
    PRIMARY KEY (cluster, node, gpu_uuid, tenant_key, bucket)
);

CREATE TABLE tenant_rollup_1h (
    cluster          text             NOT NULL,
    node             text             NOT NULL,
    gpu_uuid         text             NOT NULL,
    tenant_key       text             NOT NULL,
    bucket           integer          NOT NULL,
    samples          integer          NOT NULL,
    covered_s        real             NOT NULL,
    alloc_share_sum  real             NOT NULL,
    alloc_n          integer          NOT NULL,
    present_n        integer          NOT NULL,
    sm_util_n        integer          NOT NULL,
    sm_util_sum      real             NOT NULL,
    sm_util_max      real,
    busy_n           integer          NOT NULL,
    mem_used_n       integer          NOT NULL,
    mem_used_sum     real             NOT NULL,
    mem_used_max     bigint,
    processes_max    integer          NOT NULL,
    PRIMARY KEY (cluster, node, gpu_uuid, tenant_key, bucket)
);
