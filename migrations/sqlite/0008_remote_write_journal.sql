-- Remote-written dcgm-exporter series wait in the collector until their scrape is complete
-- (docs/prometheus.md). Each request's series are journaled here before it is answered, so a
-- restart replays them instead of losing what Prometheus was told was taken; rows go once
-- every sample in them is older than any scrape still waiting.
CREATE TABLE remote_write_journal (
    id          integer PRIMARY KEY AUTOINCREMENT,
    received_ms integer NOT NULL,
    -- The newest sample time in the row (ms).
    newest_ts   integer NOT NULL,
    -- A remote-write WriteRequest (protobuf, snappy block format) of the series gpulens reads,
    -- with the cluster resolved into a `cluster` label.
    body        blob    NOT NULL
);
