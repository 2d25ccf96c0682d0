-- Version 6: an audit event may sum calls. Refusals and reads are summed
-- per source, caller, action and reason over a minute, and the sum is one
-- event with its count; 0 is an event that stands for itself, as every
-- event written before this version does.

ALTER TABLE audit_events ADD COLUMN count INTEGER NOT NULL DEFAULT 0;
