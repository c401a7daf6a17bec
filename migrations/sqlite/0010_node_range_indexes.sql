-- The rollup reads a node's raw samples over a time range (cluster, node, ts), and reads and
-- replaces its minute rollups over a bucket range (cluster, node, bucket); pages and the
-- analysis read hour rollups the same way. The indexes SQLite had lead with the GPU (raw
-- samples) or put the GPU before the bucket (rollup primary keys), so each such range scanned
-- every row of the table or of the node: a week of history loaded in time that grew with the
-- square of its length. PostgreSQL prunes raw samples to the day's partition first.
CREATE INDEX allocation_samples_node_ts ON allocation_samples (node, ts);
CREATE INDEX mig_samples_node_ts ON mig_samples (node, ts);
CREATE INDEX process_samples_node_ts ON process_samples (node, ts);
CREATE INDEX gpu_samples_node_ts ON gpu_samples (node, ts);
CREATE INDEX gpu_rollup_1m_node_bucket ON gpu_rollup_1m (cluster, node, bucket);
CREATE INDEX tenant_rollup_1m_node_bucket ON tenant_rollup_1m (cluster, node, bucket);
CREATE INDEX gpu_rollup_1h_node_bucket ON gpu_rollup_1h (cluster, node, bucket);
CREATE INDEX tenant_rollup_1h_node_bucket ON tenant_rollup_1h (cluster, node, bucket);
