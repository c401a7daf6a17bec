-- The label workflow's audit trail: every planned GPU Operator change, who approved it, how it
-- ended, and each step with its time and result (docs/labels.md).
CREATE TABLE label_actions (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    node           text    NOT NULL,
    label          text    NOT NULL,
    value          text    NOT NULL,
    -- planned | approved | running | applied | unchanged | refused | rolled_back | failed
    state          text    NOT NULL,
    requested_by   text    NOT NULL,
    requested_ms   bigint  NOT NULL,
    approved_by    text,
    approved_ms    bigint,
    override_pods  integer NOT NULL DEFAULT 0,
    finished_ms    bigint,
    outcome        text,
    plan           text    NOT NULL
);
CREATE INDEX label_actions_node ON label_actions (node, requested_ms);

CREATE TABLE label_action_steps (
    action_id  bigint NOT NULL REFERENCES label_actions (id),
    -- Order of the step within its action.
    seq        integer NOT NULL,
    ts_ms      bigint NOT NULL,
    actor      text   NOT NULL,
    step       text   NOT NULL,
    result     text   NOT NULL,
    detail     text   NOT NULL
);
CREATE UNIQUE INDEX label_action_steps_action ON label_action_steps (action_id, seq);
