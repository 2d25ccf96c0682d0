-- Version 3: the audit log also records API calls: who made the call, in
-- which role, from where, what it asked for, on what, and the HTTP status.
-- Policy events leave these empty.

ALTER TABLE audit_events
	ADD COLUMN caller TEXT    NOT NULL DEFAULT '',
	ADD COLUMN role   TEXT    NOT NULL DEFAULT '',
	ADD COLUMN source TEXT    NOT NULL DEFAULT '',
	ADD COLUMN action TEXT    NOT NULL DEFAULT '',
	ADD COLUMN target TEXT    NOT NULL DEFAULT '',
	ADD COLUMN status INTEGER NOT NULL DEFAULT 0;
