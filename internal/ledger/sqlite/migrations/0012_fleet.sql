-- Version 12: the fleet. fleet_nodes are the nodes whose agents
-- registered (nodes, the usage rows' dimension, is another table): gpus
-- and images are JSON arrays, drained is the admin's, kept across
-- registrations. scheduler_lease is the one row of the fleet's scheduler
-- lease; token, the fencing token, rises whenever the lease changes
-- hands. job_intents are the scheduler's start intents, one per starting
-- or running job, claimed by the named node's agent. job_allocations are
-- the GPUs each starting or running job holds; shared marks a memory
-- job's share of a GPU, and the partial unique index makes the database
-- itself refuse a second job holding one GPU whole. Times are unix
-- microseconds.

CREATE TABLE fleet_nodes (
	node          TEXT PRIMARY KEY,
	agent_version TEXT NOT NULL,
	gpus          TEXT NOT NULL,
	images        TEXT NOT NULL,
	api           TEXT NOT NULL,
	drained       BOOLEAN NOT NULL DEFAULT FALSE,
	registered_us BIGINT NOT NULL,
	updated_us    BIGINT NOT NULL
);

CREATE TABLE scheduler_lease (
	id           INTEGER PRIMARY KEY CHECK (id = 1),
	instance     TEXT NOT NULL,
	node         TEXT NOT NULL,
	token        BIGINT NOT NULL,
	acquired_us  BIGINT NOT NULL,
	heartbeat_us BIGINT NOT NULL,
	released     BOOLEAN NOT NULL
);
INSERT INTO scheduler_lease (id, instance, node, token, acquired_us, heartbeat_us, released)
VALUES (1, '', '', 0, 0, 0, TRUE);

CREATE TABLE job_intents (
	job_seq    BIGINT PRIMARY KEY REFERENCES jobs (seq),
	node       TEXT NOT NULL,
	gpus       TEXT NOT NULL,
	token      BIGINT NOT NULL,
	placement  TEXT,
	created_us BIGINT NOT NULL,
	claimed_by TEXT NOT NULL DEFAULT '',
	claimed_us BIGINT
);
CREATE INDEX job_intents_unclaimed ON job_intents (node, job_seq) WHERE claimed_by = '';

CREATE TABLE job_allocations (
	job_seq  BIGINT NOT NULL REFERENCES jobs (seq),
	node     TEXT NOT NULL,
	gpu_uuid TEXT NOT NULL,
	shared   BOOLEAN NOT NULL,
	PRIMARY KEY (job_seq, node, gpu_uuid)
);
CREATE UNIQUE INDEX job_allocations_whole ON job_allocations (node, gpu_uuid) WHERE NOT shared;
CREATE INDEX job_allocations_gpu ON job_allocations (node, gpu_uuid);
