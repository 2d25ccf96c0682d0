-- Version 2: the policy's audit log. at_us is unix microseconds; evidence
-- a JSON object of named figures.

CREATE TABLE audit_events (
	id           BIGSERIAL PRIMARY KEY,
	at_us        BIGINT NOT NULL,
	node         TEXT NOT NULL,
	kind         TEXT NOT NULL,
	rule         TEXT NOT NULL,
	finding_id   TEXT NOT NULL,
	container_id TEXT NOT NULL,
	container    TEXT NOT NULL,
	owner        TEXT NOT NULL,
	evidence     TEXT NOT NULL,
	dry_run      BOOLEAN NOT NULL,
	outcome      TEXT NOT NULL,
	attempts     BIGINT NOT NULL,
	error        TEXT NOT NULL
);

CREATE INDEX audit_events_at ON audit_events (at_us);
