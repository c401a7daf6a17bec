-- Sealed raw samples. The seal pass moves raw rows older than the hot window out of the
-- *_samples tables into these: one row per series (a GPU, a process, an allocation, a MIG
-- instance) and ten minutes from `block_start`, its samples encoded column by column in `data`
-- (model::sealed), `n` of them. Readers read both forms in one statement (store/src/raw.rs). A
-- series' late samples become another block of the same span, so (series, block_start) is not
-- unique.
CREATE TABLE gpu_blocks (
    cluster   text        NOT NULL,
    node      text        NOT NULL,
    gpu_uuid  text        NOT NULL,
    block_start timestamptz NOT NULL,
    n         integer     NOT NULL,
    data      bytea       NOT NULL
) PARTITION BY RANGE (block_start);
CREATE INDEX gpu_blocks_gpu_start ON gpu_blocks (gpu_uuid, block_start);
CREATE INDEX gpu_blocks_node_start ON gpu_blocks (node, block_start);

CREATE TABLE mig_blocks (
    cluster   text        NOT NULL,
    node      text        NOT NULL,
    gpu_uuid  text        NOT NULL,
    gi_id     integer     NOT NULL,
    ci_id     integer     NOT NULL,
    block_start timestamptz NOT NULL,
    n         integer     NOT NULL,
    data      bytea       NOT NULL
) PARTITION BY RANGE (block_start);
CREATE INDEX mig_blocks_gpu_start ON mig_blocks (gpu_uuid, block_start);
CREATE INDEX mig_blocks_node_start ON mig_blocks (node, block_start);

CREATE TABLE process_blocks (
    cluster     text        NOT NULL,
    node        text        NOT NULL,
    gpu_uuid    text        NOT NULL,
    pid         bigint      NOT NULL,
    start_time  timestamptz NOT NULL,
    kind        text        NOT NULL,
    gi_id       integer,
    ci_id       integer,
    tenant_key  text,
    block_start timestamptz NOT NULL,
    n           integer     NOT NULL,
    data        bytea       NOT NULL
) PARTITION BY RANGE (block_start);
CREATE INDEX process_blocks_gpu_start ON process_blocks (gpu_uuid, block_start);
CREATE INDEX process_blocks_node_start ON process_blocks (node, block_start);
CREATE INDEX process_blocks_tenant_start ON process_blocks (tenant_key, block_start);

CREATE TABLE allocation_blocks (
    cluster     text        NOT NULL,
    node        text        NOT NULL,
    gpu_uuid    text        NOT NULL,
    tenant_key  text        NOT NULL,
    gi_id       integer,
    ci_id       integer,
    replica     integer,
    block_start timestamptz NOT NULL,
    n           integer     NOT NULL,
    data        bytea       NOT NULL
) PARTITION BY RANGE (block_start);
CREATE INDEX allocation_blocks_gpu_start ON allocation_blocks (gpu_uuid, block_start);
CREATE INDEX allocation_blocks_node_start ON allocation_blocks (node, block_start);
