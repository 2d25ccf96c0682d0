-- Version 9: GPU history. Per-GPU minute and hour rows gain the GPU's
-- sampled figures: how many samples the row holds, and the sum and the
-- maximum of each figure over them (SM utilisation in hundredths of a
-- percent, memory used in bytes, power in milliwatts, temperature in
-- hundredths of a degree Celsius). Sums add exactly across batches and
-- the hour rollup; a mean is the sum over the samples. Rows written
-- before this version hold no samples (0), and reads give them no figures.

ALTER TABLE gpu_minute ADD COLUMN samples bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_minute ADD COLUMN util_sum_cpct bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_minute ADD COLUMN util_max_cpct bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_minute ADD COLUMN mem_sum_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_minute ADD COLUMN mem_max_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_minute ADD COLUMN power_sum_mw bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_minute ADD COLUMN power_max_mw bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_minute ADD COLUMN temp_sum_ccel bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_minute ADD COLUMN temp_max_ccel bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN samples bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN util_sum_cpct bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN util_max_cpct bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN mem_sum_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN mem_max_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN power_sum_mw bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN power_max_mw bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN temp_sum_ccel bigint NOT NULL DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN temp_max_ccel bigint NOT NULL DEFAULT 0;
