-- Version 7: the GPU queue's jobs. seq is the ledger's job sequence
-- number and id its short form (j-000123); job_sequence holds the last
-- number given out. Times are unix microseconds (NULL when unknown);
-- gpus, command and env_keys are JSON arrays (env_keys names only, never
-- values); request is the submitted request as the queue encodes it.

CREATE TABLE job_sequence (
	last BIGINT NOT NULL
);
INSERT INTO job_sequence (last) VALUES (0);

CREATE TABLE jobs (
	seq            BIGINT PRIMARY KEY,
	id             TEXT NOT NULL UNIQUE,
	node           TEXT NOT NULL,
	name           TEXT NOT NULL,
	user_name      TEXT NOT NULL,
	team           TEXT NOT NULL,
	state          TEXT NOT NULL,
	reason         TEXT NOT NULL,
	reason_text    TEXT NOT NULL,
	gpus_requested BIGINT NOT NULL,
	gpus           TEXT NOT NULL,
	image          TEXT NOT NULL,
	command        TEXT NOT NULL,
	env_keys       TEXT NOT NULL,
	request        TEXT NOT NULL,
	time_limit_us  BIGINT NOT NULL,
	submitted_us   BIGINT NOT NULL,
	started_us     BIGINT,
	ended_us       BIGINT,
	exit_code      BIGINT,
	container_id   TEXT NOT NULL,
	held           BOOLEAN NOT NULL,
	attempts       BIGINT NOT NULL,
	requeues       BIGINT NOT NULL,
	updated_us     BIGINT NOT NULL,
	rev            BIGINT NOT NULL
);
CREATE INDEX jobs_state ON jobs (state, seq);
CREATE INDEX jobs_user ON jobs (user_name, seq);
