-- Per-GPU sharing mechanisms the collector saw in place on each node (docs/analytics.md,
-- "What each pool has"): DRA devices of NVIDIA's driver in the node's ResourceSlices (shared
-- claims; consumable capacity where a device allows several allocations), HAMi's registration
-- annotation on the node. Each demand poll replaces a cluster's rows with what it saw.
CREATE TABLE node_mechanisms (
    cluster    text   NOT NULL,
    node       text   NOT NULL,
    mechanism  text   NOT NULL,
    seen_ms    bigint NOT NULL,
    PRIMARY KEY (cluster, node, mechanism)
);
