-- Version 10: minute chunks. Once a node's hour has closed, its minute
-- rows move into one chunk per (node, hour) and table family: the hour's
-- series, their minutes and every column's values delta- and
-- varint-encoded and deflated (sqlledger/chunk.go; docs/design.md,
-- "Rollups and minute chunks"). The minute tables keep the open hour and rows written
-- late, which the next compaction merges. The minute rows of a ledger
-- from before this version are compacted when it is opened. The chunks
-- are compressed already: EXTERNAL keeps TOAST from trying again.

CREATE TABLE usage_chunk (
	node_id bigint NOT NULL,
	start   bigint NOT NULL,
	data    bytea NOT NULL,
	PRIMARY KEY (node_id, start)
);
ALTER TABLE usage_chunk ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX usage_chunk_start ON usage_chunk (start);

CREATE TABLE gpu_chunk (LIKE usage_chunk INCLUDING ALL);
CREATE TABLE container_chunk (LIKE usage_chunk INCLUDING ALL);
