-- Alerting (docs/alerts.md): the state of every alert, the notifications built for each
-- receiver (an outbox delivered in order), and every delivery attempt.
CREATE TABLE alerts (
    fingerprint  text   PRIMARY KEY,
    rule         text   NOT NULL,
    -- JSON objects of strings.
    labels       text   NOT NULL,
    annotations  text   NOT NULL,
    -- pending | firing | resolved
    state        text   NOT NULL,
    value        double precision NOT NULL,
    -- When the condition was first seen, when the alert fired, when it resolved.
    active_ms    bigint NOT NULL,
    starts_ms    bigint,
    ends_ms      bigint,
    updated_ms   bigint NOT NULL
);

CREATE TABLE alert_notifications (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    receiver      text    NOT NULL,
    group_key     text    NOT NULL,
    -- firing | resolved: the status of the group when the notification was built.
    status        text    NOT NULL,
    -- The alerts it carries and their status, to tell a changed group from a repeat.
    digest        text    NOT NULL,
    -- Alerts carried: firing, resolved.
    firing        integer NOT NULL,
    resolved      integer NOT NULL,
    -- The body to send, in the receiver's format.
    payload       text    NOT NULL,
    created_ms    bigint  NOT NULL,
    -- queued | delivered | failed | superseded (Alertmanager pushes a newer one replaced)
    state         text    NOT NULL,
    attempts      integer NOT NULL DEFAULT 0,
    -- Not retried before this time.
    next_ms       bigint  NOT NULL,
    delivered_ms  bigint,
    last_error    text
);
CREATE INDEX alert_notifications_queue ON alert_notifications (receiver, state, id);
CREATE INDEX alert_notifications_group ON alert_notifications (receiver, group_key, id);

CREATE TABLE alert_attempts (
    notification_id  bigint  NOT NULL REFERENCES alert_notifications (id),
    ts_ms            bigint  NOT NULL,
    -- delivered | retry | failed
    outcome          text    NOT NULL,
    http_status      integer,
    detail           text    NOT NULL,
    duration_ms      bigint  NOT NULL
);
CREATE INDEX alert_attempts_notification ON alert_attempts (notification_id, ts_ms);
