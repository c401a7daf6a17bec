-- Energy per GPU and per tenant (docs/cost.md, "Energy"): each GPU rollup keeps the joules its
-- GPU drew and how many samples they are known for, each tenant rollup the joules charged to
-- the tenant and, of those, the joules charged while its allocation ran no kernel. Rows rolled
-- up before this migration have no energy (energy_n = 0: unknown, not zero); the rollup job
-- fills them if their minutes are rolled up again.

ALTER TABLE gpu_rollup_1m
    ADD COLUMN energy_n integer          NOT NULL DEFAULT 0,
    ADD COLUMN energy_j double precision NOT NULL DEFAULT 0;
ALTER TABLE gpu_rollup_1h
    ADD COLUMN energy_n integer          NOT NULL DEFAULT 0,
    ADD COLUMN energy_j double precision NOT NULL DEFAULT 0;
ALTER TABLE cluster_rollup_1h
    ADD COLUMN energy_n integer          NOT NULL DEFAULT 0,
    ADD COLUMN energy_j double precision NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1m
    ADD COLUMN energy_j      double precision NOT NULL DEFAULT 0,
    ADD COLUMN idle_energy_j double precision NOT NULL DEFAULT 0;
ALTER TABLE tenant_rollup_1h
    ADD COLUMN energy_j      double precision NOT NULL DEFAULT 0,
    ADD COLUMN idle_energy_j double precision NOT NULL DEFAULT 0;
