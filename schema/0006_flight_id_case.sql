-- spoolite schema 6: flight ids that differ only in letter case.
--
-- The contract keeps a flight id as sent (the key is computed from it), so
-- "ba0117-20261129" beside "BA0117-20261129" makes two flights; the operator is
-- told of it. A batch finds each of its flights through this index (one look-up
-- per run of a flight's events, as before through the index of the id itself),
-- which also returns a new id's other spellings: one index entry more per new
-- flight, nothing per event. SQLite's lower() folds ASCII letters only, and flight
-- ids are printable ASCII.
CREATE INDEX flight_id_lower ON flight (lower(flight_id));
