-- spoolite PostgreSQL schema 8: writers of other flights apply side by side
-- (store/postgres/batch.rs). A batch numbers the rows it writes from this
-- sequence as it writes them; in its last step, under the lock of the one
-- spoolite_change_seq row, held to its COMMIT, it gives the rows whose number
-- is not above every committed one (another writer took higher numbers and
-- committed first) new numbers from the sequence, and moves the counter past
-- its own. The sequence never gives a number below the counter's next_seq
-- (`spoolite check` says so; a writer moves it up if it finds it behind);
-- copy-db moves both.

CREATE SEQUENCE spoolite_change_seq_next AS bigint;
-- Under the counter row's lock: a writer of schema 7 applying meanwhile has
-- committed its numbers first.
SELECT setval('spoolite_change_seq_next', next_seq, false) FROM spoolite_change_seq FOR UPDATE;
