-- Weekly utilization reports (docs/reports.md), one per ISO week and time zone.
CREATE TABLE reports (
    -- e.g. 2026-W46
    week          text   NOT NULL,
    timezone      text   NOT NULL,
    from_ms       bigint NOT NULL,
    to_ms         bigint NOT NULL,
    generated_ms  bigint NOT NULL,
    summary       text   NOT NULL,
    -- The report's numbers as JSON (collector::reports::content::ReportData).
    data          text   NOT NULL,
    html          text   NOT NULL,
    csv           text   NOT NULL,
    PRIMARY KEY (week, timezone)
);
