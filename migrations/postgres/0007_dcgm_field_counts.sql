-- Each DCGM profiling field gets its own sample count. Until now occupancy, tensor and DRAM
-- activity were summed only in samples that also had SM activity and averaged over those,
-- so sources without DCGM_FI_PROF_SM_ACTIVE (dcgm-exporter's default counters leave it out)
-- lost them. Rows written before this migration followed that rule exactly, so their counts
-- are the SM-activity count.

ALTER TABLE gpu_rollup_1m
    ADD COLUMN sm_occupancy_n  integer NOT NULL DEFAULT 0,
    ADD COLUMN tensor_active_n integer NOT NULL DEFAULT 0,
    ADD COLUMN dram_active_n   integer NOT NULL DEFAULT 0;
UPDATE gpu_rollup_1m SET sm_occupancy_n = sm_active_n, tensor_active_n = sm_active_n, dram_active_n = sm_active_n
    WHERE sm_active_n > 0;

ALTER TABLE gpu_rollup_1h
    ADD COLUMN sm_occupancy_n  integer NOT NULL DEFAULT 0,
    ADD COLUMN tensor_active_n integer NOT NULL DEFAULT 0,
    ADD COLUMN dram_active_n   integer NOT NULL DEFAULT 0;
UPDATE gpu_rollup_1h SET sm_occupancy_n = sm_active_n, tensor_active_n = sm_active_n, dram_active_n = sm_active_n
    WHERE sm_active_n > 0;

ALTER TABLE cluster_rollup_1h
    ADD COLUMN sm_occupancy_n  integer NOT NULL DEFAULT 0,
    ADD COLUMN tensor_active_n integer NOT NULL DEFAULT 0,
    ADD COLUMN dram_active_n   integer NOT NULL DEFAULT 0;
UPDATE cluster_rollup_1h SET sm_occupancy_n = sm_active_n, tensor_active_n = sm_active_n, dram_active_n = sm_active_n
    WHERE sm_active_n > 0;
