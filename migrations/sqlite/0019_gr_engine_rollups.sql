-- Graphics-engine activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE) is rolled up like the other
-- profiling ratios: each GPU and cluster rollup keeps how many samples had it and their sum.
-- Rows rolled up before this migration have none (gr_engine_active_n = 0: unknown, not zero);
-- the rollup job fills them if their minutes are rolled up again.

ALTER TABLE gpu_rollup_1m ADD COLUMN gr_engine_active_n integer NOT NULL DEFAULT 0;
ALTER TABLE gpu_rollup_1m ADD COLUMN gr_engine_active_sum real NOT NULL DEFAULT 0;
ALTER TABLE gpu_rollup_1h ADD COLUMN gr_engine_active_n integer NOT NULL DEFAULT 0;
ALTER TABLE gpu_rollup_1h ADD COLUMN gr_engine_active_sum real NOT NULL DEFAULT 0;
ALTER TABLE cluster_rollup_1h ADD COLUMN gr_engine_active_n integer NOT NULL DEFAULT 0;
ALTER TABLE cluster_rollup_1h ADD COLUMN gr_engine_active_sum real NOT NULL DEFAULT 0;
