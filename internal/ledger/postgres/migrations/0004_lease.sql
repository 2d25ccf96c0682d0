-- Node leases: the one agent instance that writes each node's rows, when
-- it started and last wrote (unix microseconds, by the ledger's clock),
-- and the sequence number of the last batch it committed, which makes a
-- batch sent again after a lost COMMIT reply a no-op. released is set by
-- a clean stop, so that the next agent need not wait for silence.

CREATE TABLE node_leases (
	node         TEXT PRIMARY KEY,
	instance     TEXT NOT NULL,
	host         TEXT NOT NULL,
	pid          BIGINT NOT NULL,
	started_us   BIGINT NOT NULL,
	heartbeat_us BIGINT NOT NULL,
	seq          BIGINT NOT NULL,
	released     BOOLEAN NOT NULL DEFAULT FALSE
);
