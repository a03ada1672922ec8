-- spoolite schema 9: each crew row holds its flight's (or duty's) id, so the
-- views crew_flight and crew_duty read one table each.
--
-- Before, the views found the id through the flight's number (a LEFT JOIN of
-- spoolite_flight on its primary key). SQLite keeps that join under an aggregate,
-- so a count(*) of crew_flight (the first statement of Datasette's page of the
-- view) looked up a flight for each of 5M crew rows at 10M events and ran past
-- Datasette's time limit. The id is written with the row, in the transaction
-- that writes the flight's row, as schema 8 did for the events; the number stays
-- the key, through which a batch replaces a flight's crew rows.
--
-- The rows are copied with their flight's id; a crew row whose number names no
-- flight (which only a hand edit makes) is not copied: the view showed it with no
-- flight id, and `spoolite check` names such a row.

DROP VIEW crew_flight;
DROP VIEW crew_duty;

CREATE TABLE spoolite_crew_flight_9 (
    -- A spoolite_flight.ref, written in the transaction that writes its flight row.
    flight_ref      INTEGER NOT NULL,
    crew_id         TEXT NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('operating', 'positioning')),
    -- That flight's flight_id.
    flight_id       TEXT NOT NULL,
    off_blocks_utc  TEXT NOT NULL,
    on_blocks_utc   TEXT NOT NULL,
    block_minutes   REAL NOT NULL,
    PRIMARY KEY (flight_ref, crew_id)
) WITHOUT ROWID;
INSERT INTO spoolite_crew_flight_9
SELECT c.flight_ref, c.crew_id, c.role, f.flight_id, c.off_blocks_utc, c.on_blocks_utc,
       c.block_minutes
FROM spoolite_crew_flight AS c JOIN spoolite_flight AS f ON f.ref = c.flight_ref
ORDER BY c.flight_ref, c.crew_id;
DROP TABLE spoolite_crew_flight;
ALTER TABLE spoolite_crew_flight_9 RENAME TO spoolite_crew_flight;
-- One crew member's flights in a time range; everyone's flights in a time range:
-- on the instants as analysts compare them (as text, which is time order but for
-- one second's instants written with fractions of different lengths; ftl reads a
-- second more on each side and clips by time).
CREATE INDEX spoolite_crew_flight_crew ON spoolite_crew_flight (crew_id, off_blocks_utc);
CREATE INDEX spoolite_crew_flight_time ON spoolite_crew_flight (off_blocks_utc);

CREATE TABLE spoolite_crew_duty_9 (
    -- The spoolite_flight.ref of the duty's id.
    duty_ref        INTEGER NOT NULL,
    crew_id         TEXT NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('operating', 'positioning')),
    -- That id.
    duty_id         TEXT NOT NULL,
    duty_start_utc  TEXT NOT NULL,
    duty_end_utc    TEXT,
    duty_minutes    REAL,
    PRIMARY KEY (duty_ref, crew_id)
) WITHOUT ROWID;
INSERT INTO spoolite_crew_duty_9
SELECT c.duty_ref, c.crew_id, c.role, f.flight_id, c.duty_start_utc, c.duty_end_utc,
       c.duty_minutes
FROM spoolite_crew_duty AS c JOIN spoolite_flight AS f ON f.ref = c.duty_ref
ORDER BY c.duty_ref, c.crew_id;
DROP TABLE spoolite_crew_duty;
ALTER TABLE spoolite_crew_duty_9 RENAME TO spoolite_crew_duty;
CREATE INDEX spoolite_crew_duty_crew ON spoolite_crew_duty (crew_id, duty_start_utc);
CREATE INDEX spoolite_crew_duty_time ON spoolite_crew_duty (duty_start_utc);

CREATE VIEW crew_flight AS
SELECT crew_id, role, flight_id, off_blocks_utc, on_blocks_utc, block_minutes
FROM spoolite_crew_flight;

CREATE VIEW crew_duty AS
SELECT crew_id, role, duty_id, duty_start_utc, duty_end_utc, duty_minutes
FROM spoolite_crew_duty;
