-- Version 5: held GPU-seconds (ledger.Sums.HeldSeconds), in microseconds:
-- the time each running container holding a GPU had it, not split among
-- the holders. Rows written before this version have none: NULL, which
-- reads as unknown, never as 0. A batch adds to a row with plain + (see
-- write.go), so a row that an older release began stays NULL: its held
-- time is known for only part of what it sums.

ALTER TABLE usage_minute ADD COLUMN held_us bigint;
ALTER TABLE usage_hour ADD COLUMN held_us bigint;
