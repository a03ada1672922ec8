-- spoolite PostgreSQL schema 2: flight ids that differ only in letter case.
--
-- The contract keeps a flight id as sent (the key is computed from it), so
-- "ba0117-20261129" beside "BA0117-20261129" makes two flights; the operator is
-- told of it. This table holds every flight id stored, one row each (not one per
-- event: duty_event_data gains no index), and its index of the lowered id finds
-- the other spellings of a batch's new ids. A writer adds its batch's new ids, one
-- statement per batch, under the change_seq_counter lock it applies under, so
-- that two writers of two spellings see each other. COLLATE "C": lower() folds
-- ASCII letters only, whatever the database's locale (flight ids are ASCII).
CREATE TABLE spoolite_flight_id (
    flight_id  text COLLATE "C" PRIMARY KEY
);
CREATE INDEX spoolite_flight_id_lower ON spoolite_flight_id (lower(flight_id));
INSERT INTO spoolite_flight_id (flight_id) SELECT DISTINCT flight_id FROM duty_event_data;
