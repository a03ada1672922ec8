-- spoolite schema 7: the crew of every flight and duty, kept per batch.
--
-- spoolite_crew_flight holds one row per crew member of each flight with block
-- time: the crew of the flight's first live off_blocks event (the one
-- flight.off_blocks_utc names) with the flight's times copied in, for flights
-- whose on-blocks is not before their off-blocks. spoolite_crew_duty holds one
-- row per crew member of each duty (the flight id of its duty_start and
-- duty_end events): the crew of its first live duty_start, its start, and its
-- last live duty_end when that is not before the start (else NULL: open). The
-- crew rules are the contract's (src/crew.rs); each batch, in its own
-- transaction, computes again from their live rows the crew rows of every
-- flight and duty it holds an off_blocks, on_blocks, duty_start or duty_end
-- event of, so the rows depend only on the live events, as flight's times do.
-- This migration only creates the tables and views; spoolite then builds the rows
-- of the events already stored with the same code, in the same transaction.
--
-- The times are kept in the crew rows so that a crew member's time range, and
-- everyone's, is an index range with no join; the flight id is read through the
-- flight's number (a LEFT JOIN on its primary key, left out of a query that reads
-- no flight_id). Minutes are REAL rounded to 0.01, as flight_times'.

CREATE TABLE spoolite_crew_flight (
    -- A flight.ref, written in the transaction that writes its flight row.
    flight_ref      INTEGER NOT NULL,
    crew_id         TEXT NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('operating', 'positioning')),
    off_blocks_utc  TEXT NOT NULL,
    on_blocks_utc   TEXT NOT NULL,
    block_minutes   REAL NOT NULL,
    PRIMARY KEY (flight_ref, crew_id)
) WITHOUT ROWID;
-- One crew member's flights in a time range; everyone's flights in a time range:
-- on the instants as analysts compare them (as text, which is time order but for
-- one second's instants written with fractions of different lengths; ftl reads a
-- second more on each side and clips by time).
CREATE INDEX spoolite_crew_flight_crew ON spoolite_crew_flight (crew_id, off_blocks_utc);
CREATE INDEX spoolite_crew_flight_time ON spoolite_crew_flight (off_blocks_utc);

CREATE TABLE spoolite_crew_duty (
    -- The flight.ref of the duty's id.
    duty_ref        INTEGER NOT NULL,
    crew_id         TEXT NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('operating', 'positioning')),
    duty_start_utc  TEXT NOT NULL,
    duty_end_utc    TEXT,
    duty_minutes    REAL,
    PRIMARY KEY (duty_ref, crew_id)
) WITHOUT ROWID;
CREATE INDEX spoolite_crew_duty_crew ON spoolite_crew_duty (crew_id, duty_start_utc);
CREATE INDEX spoolite_crew_duty_time ON spoolite_crew_duty (duty_start_utc);

CREATE VIEW crew_flight AS
SELECT c.crew_id,
       c.role,
       f.flight_id,
       c.off_blocks_utc,
       c.on_blocks_utc,
       c.block_minutes
FROM spoolite_crew_flight AS c
LEFT JOIN flight AS f ON f.ref = c.flight_ref;

CREATE VIEW crew_duty AS
SELECT c.crew_id,
       c.role,
       f.flight_id AS duty_id,
       c.duty_start_utc,
       c.duty_end_utc,
       c.duty_minutes
FROM spoolite_crew_duty AS c
LEFT JOIN flight AS f ON f.ref = c.duty_ref;
