-- Work waiting for GPUs (docs/demand.md): one row per waiting episode of a pod (later a Slurm
-- job or Kueue workload) and GPU resource, kept current by the collector's demand poll.
-- `since_ms` is when it began to wait (a pod's creation time), `last_seen_ms` the last poll
-- that saw it waiting; the analysis counts the time between them as waiting.
CREATE TABLE waiting_work (
    cluster        text    NOT NULL,
    source         text    NOT NULL,
    uid            text    NOT NULL,
    scope          text    NOT NULL,
    team           text    NOT NULL,
    name           text    NOT NULL,
    resource       text    NOT NULL,
    count          integer NOT NULL,
    product        text,
    reason         text    NOT NULL,
    message        text    NOT NULL,
    since_ms       integer NOT NULL,
    first_seen_ms  integer NOT NULL,
    last_seen_ms   integer NOT NULL,
    PRIMARY KEY (cluster, source, uid, resource)
);
CREATE INDEX waiting_work_last_seen ON waiting_work (last_seen_ms);
