-- The reclaim loop's audit trail (docs/reclaim.md): every idle holding a policy took up, the
-- notice, the grace, who approved or cancelled it, what was done to which object and how to
-- undo it, what the outcome check measured; and each step with its time and result.
CREATE TABLE reclaim_cases (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster        text    NOT NULL,
    node           text    NOT NULL,
    gpu            text    NOT NULL,
    tenant         text    NOT NULL,
    tenant_name    text    NOT NULL,
    namespace      text    NOT NULL,
    pod            text    NOT NULL,
    pod_uid        text    NOT NULL,
    team           text    NOT NULL,
    policy         text    NOT NULL,
    -- report | scale-to-zero | suspend
    action         text    NOT NULL,
    dry_run        integer NOT NULL,
    finding        text    NOT NULL,
    idle_hours     double precision NOT NULL,
    idle_share     double precision NOT NULL,
    -- The series that showed the holding idle (metric, entity): use on it cancels the case.
    signal_metric  text    NOT NULL,
    signal_entity  text    NOT NULL,
    -- noticed | awaiting_approval | approved | acted | freed | not_freed | cancelled |
    -- reported | dry_run | refused | failed
    state          text    NOT NULL,
    opened_ms      bigint  NOT NULL,
    act_after_ms   bigint  NOT NULL,
    decided_by     text,
    decided_ms     bigint,
    target         text,
    acted_ms       bigint,
    finished_ms    bigint,
    outcome        text,
    undo           text
);
CREATE INDEX reclaim_cases_tenant ON reclaim_cases (cluster, tenant, opened_ms);
CREATE INDEX reclaim_cases_state ON reclaim_cases (state);

CREATE TABLE reclaim_steps (
    case_id  bigint NOT NULL REFERENCES reclaim_cases (id),
    -- Order of the step within its case.
    seq      integer NOT NULL,
    ts_ms    bigint NOT NULL,
    actor    text   NOT NULL,
    step     text   NOT NULL,
    result   text   NOT NULL,
    detail   text   NOT NULL
);
CREATE UNIQUE INDEX reclaim_steps_case ON reclaim_steps (case_id, seq);
