-- spoolite PostgreSQL schema 3: flight times kept per flight, and the crew of
-- every flight and duty, kept per batch.
--
-- spoolite_flight holds, per flight with at least one live off_blocks, takeoff,
-- landing or on_blocks event, its first off-blocks and takeoff and its last
-- landing and on-blocks, as SQLite's flight does; each batch computes them again
-- for the flights it wrote a timed event of, under the change_seq_counter lock it
-- applies under (so two writers of one flight recompute one after the other, the
-- second seeing the first's rows). flight_times reads it, with the same columns,
-- types and values as the view of schema 1 computed from every event.
--
-- spoolite_crew_flight holds one row per crew member of each flight with block
-- time (the crew of its first live off_blocks, the one off_blocks_utc names;
-- on-blocks not before off-blocks), spoolite_crew_duty one per crew member of
-- each duty (the flight id of its duty_start and duty_end events: the crew of
-- its first live duty_start, and its last live duty_end unless that is before
-- the start, else open: NULL). The crew rules are the contract's (src/crew.rs),
-- applied by spoolite: this migration creates the tables and fills
-- spoolite_flight; spoolite then builds the crew rows of the events already
-- stored with the code each batch runs, in the same transaction. The times are
-- kept in the crew rows, so that a crew member's time range, and everyone's, is
-- an index range with no join.

CREATE TABLE spoolite_flight (
    flight_id       text PRIMARY KEY,
    off_blocks_utc  text COLLATE "C",
    takeoff_utc     text COLLATE "C",
    landing_utc     text COLLATE "C",
    on_blocks_utc   text COLLATE "C",
    CHECK (coalesce(off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc) IS NOT NULL)
);
INSERT INTO spoolite_flight (flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc)
SELECT flight_id,
       min(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'off_blocks') || 'Z',
       min(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'takeoff') || 'Z',
       max(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'landing') || 'Z',
       max(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'on_blocks') || 'Z'
FROM duty_event_data
WHERE NOT retracted AND event_kind IN ('off_blocks', 'takeoff', 'landing', 'on_blocks')
GROUP BY flight_id;
-- A range of days of flight_times by off-blocks, written plainly.
CREATE INDEX spoolite_flight_off_blocks ON spoolite_flight (off_blocks_utc);

DROP VIEW flight_times;
CREATE VIEW flight_times AS
SELECT flight_id,
       off_blocks_utc,
       takeoff_utc,
       landing_utc,
       on_blocks_utc,
       round(extract(epoch FROM on_blocks_utc::timestamptz - off_blocks_utc::timestamptz) / 60, 2)
           AS block_minutes,
       round(extract(epoch FROM landing_utc::timestamptz - takeoff_utc::timestamptz) / 60, 2)
           AS airborne_minutes
FROM spoolite_flight;

CREATE TABLE spoolite_crew_flight (
    flight_id       text NOT NULL,
    crew_id         text COLLATE "C" NOT NULL,
    role            text NOT NULL CHECK (role IN ('operating', 'positioning')),
    off_blocks_utc  text COLLATE "C" NOT NULL,
    on_blocks_utc   text COLLATE "C" NOT NULL,
    block_minutes   numeric NOT NULL,
    PRIMARY KEY (flight_id, crew_id)
);
-- One crew member's flights in a time range; everyone's flights in a time range:
-- on the instants as analysts compare them (as text, which is time order but for
-- one second's instants written with fractions of different lengths; ftl reads a
-- second more on each side and clips by time).
CREATE INDEX spoolite_crew_flight_crew ON spoolite_crew_flight (crew_id, off_blocks_utc);
CREATE INDEX spoolite_crew_flight_time ON spoolite_crew_flight (off_blocks_utc);

CREATE TABLE spoolite_crew_duty (
    duty_id         text NOT NULL,
    crew_id         text COLLATE "C" NOT NULL,
    role            text NOT NULL CHECK (role IN ('operating', 'positioning')),
    duty_start_utc  text COLLATE "C" NOT NULL,
    duty_end_utc    text COLLATE "C",
    duty_minutes    numeric,
    PRIMARY KEY (duty_id, crew_id)
);
CREATE INDEX spoolite_crew_duty_crew ON spoolite_crew_duty (crew_id, duty_start_utc);
CREATE INDEX spoolite_crew_duty_time ON spoolite_crew_duty (duty_start_utc);

CREATE VIEW crew_flight AS
SELECT crew_id, role, flight_id, off_blocks_utc, on_blocks_utc, block_minutes
FROM spoolite_crew_flight;

CREATE VIEW crew_duty AS
SELECT crew_id, role, duty_id, duty_start_utc, duty_end_utc, duty_minutes
FROM spoolite_crew_duty;
