-- Version 8: the queue's fair share. budget_lifts are the teams whose
-- GPU-hour budget an admin lifted for one calendar month (UTC, 'YYYY-MM');
-- a second lift of the same month records who lifted it last. jobs gain
-- placement, the scheduler's record of where a job was placed and why
-- (JSON; NULL before the job is placed, and for jobs written before this
-- version).

CREATE TABLE budget_lifts (
	team      TEXT NOT NULL,
	month     TEXT NOT NULL,
	lifted_by TEXT NOT NULL,
	lifted_us BIGINT NOT NULL,
	PRIMARY KEY (team, month)
);

ALTER TABLE jobs ADD COLUMN placement TEXT;
