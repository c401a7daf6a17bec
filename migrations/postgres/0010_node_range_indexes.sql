-- The rollup reads and replaces a node's minute rollups over a bucket range (cluster, node,
-- bucket); pages and the analysis read hour rollups the same way. The primary keys put the GPU
-- (and tenant) before the bucket, so such a range read every row of the node. Raw samples need
-- no such index here: a range is pruned to its day partitions first.
CREATE INDEX gpu_rollup_1m_node_bucket ON gpu_rollup_1m (cluster, node, bucket);
CREATE INDEX tenant_rollup_1m_node_bucket ON tenant_rollup_1m (cluster, node, bucket);
CREATE INDEX gpu_rollup_1h_node_bucket ON gpu_rollup_1h (cluster, node, bucket);
CREATE INDEX tenant_rollup_1h_node_bucket ON tenant_rollup_1h (cluster, node, bucket);
