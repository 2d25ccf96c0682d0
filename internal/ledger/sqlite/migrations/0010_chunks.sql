-- Version 10: minute chunks. Once a node's hour has closed, its minute
-- rows move into one chunk per (node, hour) and table family: the hour's
-- series, their minutes and every column's values delta- and
-- varint-encoded and deflated (sqlledger/chunk.go; docs/design.md,
-- "Rollups and minute chunks"). The minute tables keep the open hour and rows written
-- late, which the next compaction merges. The minute rows of a ledger
-- from before this version are compacted when it is opened.
-- A rowid table: a chunk of a few kilobytes would leave most of its last
-- overflow page empty in a WITHOUT ROWID table.

CREATE TABLE usage_chunk (
	node_id INTEGER NOT NULL,
	start   INTEGER NOT NULL,
	data    BLOB NOT NULL,
	PRIMARY KEY (node_id, start)
);
CREATE INDEX usage_chunk_start ON usage_chunk (start);

CREATE TABLE gpu_chunk (
	node_id INTEGER NOT NULL,
	start   INTEGER NOT NULL,
	data    BLOB NOT NULL,
	PRIMARY KEY (node_id, start)
);
CREATE INDEX gpu_chunk_start ON gpu_chunk (start);

CREATE TABLE container_chunk (
	node_id INTEGER NOT NULL,
	start   INTEGER NOT NULL,
	data    BLOB NOT NULL,
	PRIMARY KEY (node_id, start)
);
CREATE INDEX container_chunk_start ON container_chunk (start);
