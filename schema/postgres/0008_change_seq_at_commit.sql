-- spoolite PostgreSQL schema 8: a batch's change_seq numbers are handed out at
-- the end of its transaction, just before its COMMIT, under the lock of the one
-- spoolite_change_seq row (store/postgres/batch.rs). Until then the rows it
-- writes carry none: no other transaction ever sees such a row, and `spoolite
-- check` reports one that was committed. Dropping NOT NULL rewrites nothing.

ALTER TABLE spoolite_event ALTER COLUMN change_seq DROP NOT NULL;
