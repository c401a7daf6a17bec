-- Effective use and idle runs per tenant (analytics). Rows rolled up before this migration
-- keep zeros here: their effective use reads as unknown (eff_n = 0), never as idle.
ALTER TABLE tenant_rollup_1m ADD COLUMN eff_n integer NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1m ADD COLUMN eff_sum double precision NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1m ADD COLUMN eff_dcgm_n integer NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1m ADD COLUMN eff_hist bytea;
ALTER TABLE tenant_rollup_1m ADD COLUMN active_n integer NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1m ADD COLUMN idle_n integer NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1m ADD COLUMN idle_lead_s double precision NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1m ADD COLUMN idle_trail_s double precision NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1m ADD COLUMN idle_max_s double precision NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1h ADD COLUMN eff_n integer NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1h ADD COLUMN eff_sum double precision NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1h ADD COLUMN eff_dcgm_n integer NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1h ADD COLUMN eff_hist bytea;
ALTER TABLE tenant_rollup_1h ADD COLUMN active_n integer NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1h ADD COLUMN idle_n integer NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1h ADD COLUMN idle_lead_s double precision NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1h ADD COLUMN idle_trail_s double precision NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1h ADD COLUMN idle_max_s double precision NOT NULL DEFAULT 0;

-- Processes no tenant could be found for: the analytics looks for zombies among them.
CREATE INDEX process_samples_unattributed ON process_samples (ts) WHERE tenant_key IS NULL;

-- Results of scheduled analyses (funnel, findings, recommendations), newest served by the API.
CREATE TABLE analysis_runs (
    generated   timestamptz NOT NULL PRIMARY KEY,
    range_from  timestamptz NOT NULL,
    range_to    timestamptz NOT NULL,
    body        jsonb  NOT NULL
);
