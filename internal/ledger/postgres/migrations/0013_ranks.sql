-- Version 13: the fleet's queue order. fleet_ranks is one row: the
-- scheduler's latest ranking of the queued jobs (their order, positions,
-- estimated starts and why each waits, as queue.AppendRanking encodes
-- them), written under the scheduler lease's token, so that every
-- agent's API says where a queued job stands, not only the scheduler's.
-- version rises with every write; published_us is unix microseconds.

CREATE TABLE fleet_ranks (
	id           INTEGER PRIMARY KEY CHECK (id = 1),
	version      BIGINT NOT NULL,
	token        BIGINT NOT NULL,
	published_us BIGINT NOT NULL,
	body         BYTEA NOT NULL
);
INSERT INTO fleet_ranks (id, version, token, published_us, body) VALUES (1, 0, 0, 0, ''::bytea);
