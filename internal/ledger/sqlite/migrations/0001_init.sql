-- The gpumeter ledger, version 1.
--
-- Times are unix seconds. Usage tables hold fixed-point integers (see
-- ledger.Sums): *_us microseconds, *_mj millijoules, *_byte_s byte-seconds,
-- *_cpct hundredths of a percent. Nodes, GPUs and owners are referred to by
-- small integer ids to keep minute rows small; they are never deleted.

CREATE TABLE gpumeter_meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE nodes (
	id         INTEGER PRIMARY KEY,
	name       TEXT NOT NULL UNIQUE,
	first_seen INTEGER, -- NULL until a batch describes the node
	last_seen  INTEGER
);

CREATE TABLE gpus (
	id           INTEGER PRIMARY KEY,
	node_id      INTEGER NOT NULL,
	uuid         TEXT NOT NULL,
	idx          INTEGER, -- NULL until a batch describes the GPU
	model        TEXT NOT NULL DEFAULT '',
	memory_total INTEGER NOT NULL DEFAULT 0,
	UNIQUE (node_id, uuid)
);

-- An owner is a container (name = container ID), a Unix user on the host
-- (name = user name) or nobody (kind 'none', name '').
CREATE TABLE owners (
	id      INTEGER PRIMARY KEY,
	node_id INTEGER NOT NULL,
	kind    TEXT NOT NULL,
	name    TEXT NOT NULL,
	UNIQUE (node_id, kind, name)
);

CREATE TABLE containers (
	owner_id     INTEGER PRIMARY KEY, -- owners.id, kind 'container'
	node_id      INTEGER NOT NULL,
	container_id TEXT NOT NULL,
	name         TEXT NOT NULL,
	image        TEXT NOT NULL,
	labels       TEXT NOT NULL, -- JSON object
	user_name    TEXT NOT NULL,
	team         TEXT NOT NULL,
	project      TEXT NOT NULL,
	gpu_request  TEXT NOT NULL,
	started_at   INTEGER,
	finished_at  INTEGER,
	exit_code    INTEGER,
	first_seen   INTEGER,
	last_seen    INTEGER
);

-- Time first in every usage key: reports scan a time range, writers append.
CREATE TABLE usage_minute (
	start             INTEGER NOT NULL,
	gpu_id            INTEGER NOT NULL,
	owner_id          INTEGER NOT NULL,
	allocated_us      INTEGER NOT NULL,
	present_us        INTEGER NOT NULL,
	used_us           INTEGER NOT NULL,
	memory_byte_s     INTEGER NOT NULL,
	energy_mj         INTEGER NOT NULL,
	peak_memory_bytes INTEGER NOT NULL,
	peak_util_cpct    INTEGER NOT NULL,
	PRIMARY KEY (start, gpu_id, owner_id)
) WITHOUT ROWID;

CREATE TABLE usage_hour (
	start             INTEGER NOT NULL,
	gpu_id            INTEGER NOT NULL,
	owner_id          INTEGER NOT NULL,
	allocated_us      INTEGER NOT NULL,
	present_us        INTEGER NOT NULL,
	used_us           INTEGER NOT NULL,
	memory_byte_s     INTEGER NOT NULL,
	energy_mj         INTEGER NOT NULL,
	peak_memory_bytes INTEGER NOT NULL,
	peak_util_cpct    INTEGER NOT NULL,
	PRIMARY KEY (start, gpu_id, owner_id)
) WITHOUT ROWID;

-- One owner's history (fair share, waste rules) without a full scan.
CREATE INDEX usage_hour_owner ON usage_hour (owner_id, start);

CREATE TABLE gpu_minute (
	start           INTEGER NOT NULL,
	gpu_id          INTEGER NOT NULL,
	seconds_us      INTEGER NOT NULL,
	allocated_us    INTEGER NOT NULL,
	idle_us         INTEGER NOT NULL,
	used_us         INTEGER NOT NULL,
	unattributed_us INTEGER NOT NULL,
	energy_mj       INTEGER NOT NULL,
	idle_energy_mj  INTEGER NOT NULL,
	peak_util_cpct  INTEGER NOT NULL,
	PRIMARY KEY (start, gpu_id)
) WITHOUT ROWID;

CREATE TABLE gpu_hour (
	start           INTEGER NOT NULL,
	gpu_id          INTEGER NOT NULL,
	seconds_us      INTEGER NOT NULL,
	allocated_us    INTEGER NOT NULL,
	idle_us         INTEGER NOT NULL,
	used_us         INTEGER NOT NULL,
	unattributed_us INTEGER NOT NULL,
	energy_mj       INTEGER NOT NULL,
	idle_energy_mj  INTEGER NOT NULL,
	peak_util_cpct  INTEGER NOT NULL,
	PRIMARY KEY (start, gpu_id)
) WITHOUT ROWID;

CREATE TABLE container_minute (
	start      INTEGER NOT NULL,
	owner_id   INTEGER NOT NULL,
	cpu_us     INTEGER NOT NULL,
	ram_byte_s INTEGER NOT NULL,
	PRIMARY KEY (start, owner_id)
) WITHOUT ROWID;

CREATE TABLE container_hour (
	start      INTEGER NOT NULL,
	owner_id   INTEGER NOT NULL,
	cpu_us     INTEGER NOT NULL,
	ram_byte_s INTEGER NOT NULL,
	PRIMARY KEY (start, owner_id)
) WITHOUT ROWID;
