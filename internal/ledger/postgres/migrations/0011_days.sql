-- Version 11: day rows. Usage, GPU and container rows per UTC day, kept
-- beside the hour rows (which stay as they are) and written by the same
-- upserts: a report over a month reads some 3 rows where it read 10
-- (docs/design.md, "Rollups and minute chunks").

CREATE TABLE usage_day (LIKE usage_hour INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE usage_day ADD PRIMARY KEY (start, gpu_id, owner_id);
CREATE TABLE gpu_day (LIKE gpu_hour INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE gpu_day ADD PRIMARY KEY (start, gpu_id);
CREATE TABLE container_day (LIKE container_hour INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE container_day ADD PRIMARY KEY (start, owner_id);

-- Every day the hour rows hold, rolled up. A day holding an hour row
-- without held time (written before version 5) gets a NULL held_us, as
-- the upsert would give it; the day horizon keeps reports on hour rows
-- up to the day after the last such row, where a row-by-row count of
-- them is what a report shows.
INSERT INTO usage_day (start, gpu_id, owner_id, allocated_us, held_us, present_us, used_us,
	memory_byte_s, energy_mj, peak_memory_bytes, peak_util_cpct)
SELECT start - ((start % 86400) + 86400) % 86400 AS day, gpu_id, owner_id,
	CAST(SUM(allocated_us) AS BIGINT),
	CASE WHEN COUNT(held_us) = COUNT(*) THEN CAST(SUM(held_us) AS BIGINT) END,
	CAST(SUM(present_us) AS BIGINT), CAST(SUM(used_us) AS BIGINT),
	CAST(SUM(memory_byte_s) AS BIGINT), CAST(SUM(energy_mj) AS BIGINT),
	MAX(peak_memory_bytes), MAX(peak_util_cpct)
FROM usage_hour GROUP BY day, gpu_id, owner_id;

INSERT INTO gpu_day (start, gpu_id, seconds_us, allocated_us, idle_us, used_us, unattributed_us,
	energy_mj, idle_energy_mj, peak_util_cpct, samples, util_sum_cpct, util_max_cpct,
	mem_sum_bytes, mem_max_bytes, power_sum_mw, power_max_mw, temp_sum_ccel, temp_max_ccel)
SELECT start - ((start % 86400) + 86400) % 86400 AS day, gpu_id,
	CAST(SUM(seconds_us) AS BIGINT), CAST(SUM(allocated_us) AS BIGINT), CAST(SUM(idle_us) AS BIGINT),
	CAST(SUM(used_us) AS BIGINT), CAST(SUM(unattributed_us) AS BIGINT), CAST(SUM(energy_mj) AS BIGINT),
	CAST(SUM(idle_energy_mj) AS BIGINT), MAX(peak_util_cpct), CAST(SUM(samples) AS BIGINT),
	CAST(SUM(util_sum_cpct) AS BIGINT), MAX(util_max_cpct), CAST(SUM(mem_sum_bytes) AS BIGINT), MAX(mem_max_bytes),
	CAST(SUM(power_sum_mw) AS BIGINT), MAX(power_max_mw), CAST(SUM(temp_sum_ccel) AS BIGINT), MAX(temp_max_ccel)
FROM gpu_hour GROUP BY day, gpu_id;

INSERT INTO container_day (start, owner_id, cpu_us, ram_byte_s)
SELECT start - ((start % 86400) + 86400) % 86400 AS day, owner_id,
	CAST(SUM(cpu_us) AS BIGINT), CAST(SUM(ram_byte_s) AS BIGINT)
FROM container_hour GROUP BY day, owner_id;

INSERT INTO gpumeter_meta (key, value)
SELECT 'day_horizon', CAST(m - ((m % 86400) + 86400) % 86400 + 86400 AS TEXT)
FROM (SELECT MAX(start) AS m FROM usage_hour WHERE held_us IS NULL) AS x
WHERE m IS NOT NULL;
