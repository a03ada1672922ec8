-- spoolite PostgreSQL schema 5: the crew model of the contract's *Crew hours and
-- limits*, as SQLite's schema 11 (schema/0011_crew_model.sql says what each
-- column holds).
--
-- Each crew row says the member's function and each duty its type; a flight's
-- crew is that of its latest live crew_assignment, else its first live
-- off_blocks; every flight with a live off-blocks has its crew rows (on_blocks_utc
-- and block_minutes NULL where there is no block time), and crew_flight shows
-- those with block time. spoolite_crew_fdp holds the flight duty periods. The
-- crew tables are dropped and created empty; spoolite then builds their rows from
-- every stored event in the same transaction, with the code each batch runs.
-- flight_times shows NULL minutes where the end is before the start.

DROP VIEW flight_times;
CREATE VIEW flight_times AS
SELECT flight_id,
       off_blocks_utc,
       takeoff_utc,
       landing_utc,
       on_blocks_utc,
       CASE WHEN rtrim(on_blocks_utc, 'Z') >= rtrim(off_blocks_utc, 'Z') THEN
           round(extract(epoch FROM on_blocks_utc::timestamptz - off_blocks_utc::timestamptz) / 60, 2)
       END AS block_minutes,
       CASE WHEN rtrim(landing_utc, 'Z') >= rtrim(takeoff_utc, 'Z') THEN
           round(extract(epoch FROM landing_utc::timestamptz - takeoff_utc::timestamptz) / 60, 2)
       END AS airborne_minutes
FROM spoolite_flight;

DROP VIEW crew_flight;
DROP VIEW crew_duty;
DROP TABLE spoolite_crew_flight;
DROP TABLE spoolite_crew_duty;

CREATE TABLE spoolite_crew_flight (
    flight_id       text NOT NULL,
    crew_id         text COLLATE "C" NOT NULL,
    role            text NOT NULL CHECK (role IN ('operating', 'positioning')),
    off_blocks_utc  text COLLATE "C" NOT NULL,
    on_blocks_utc   text COLLATE "C",
    block_minutes   numeric,
    function        text NOT NULL DEFAULT 'flight_crew'
                        CHECK (function IN ('flight_crew', 'cabin_crew')),
    PRIMARY KEY (flight_id, crew_id)
);
CREATE INDEX spoolite_crew_flight_crew ON spoolite_crew_flight (crew_id, off_blocks_utc);
CREATE INDEX spoolite_crew_flight_time ON spoolite_crew_flight (off_blocks_utc);

CREATE TABLE spoolite_crew_duty (
    duty_id         text NOT NULL,
    crew_id         text COLLATE "C" NOT NULL,
    role            text NOT NULL CHECK (role IN ('operating', 'positioning')),
    duty_start_utc  text COLLATE "C" NOT NULL,
    duty_end_utc    text COLLATE "C",
    duty_minutes    numeric,
    function        text NOT NULL DEFAULT 'flight_crew'
                        CHECK (function IN ('flight_crew', 'cabin_crew')),
    duty_type       text NOT NULL DEFAULT 'flight_duty'
                        CHECK (duty_type IN ('flight_duty', 'airport_standby', 'home_standby',
                                             'reserve', 'ground_duty')),
    PRIMARY KEY (duty_id, crew_id)
);
CREATE INDEX spoolite_crew_duty_crew ON spoolite_crew_duty (crew_id, duty_start_utc);
CREATE INDEX spoolite_crew_duty_time ON spoolite_crew_duty (duty_start_utc);
-- The open duties and those of over two days (see SQLite's schema 11).
CREATE INDEX spoolite_crew_duty_long ON spoolite_crew_duty (crew_id, duty_start_utc)
    WHERE duty_end_utc IS NULL OR duty_minutes > 2880;

CREATE TABLE spoolite_crew_fdp (
    duty_id         text NOT NULL,
    crew_id         text COLLATE "C" NOT NULL,
    function        text NOT NULL CHECK (function IN ('flight_crew', 'cabin_crew')),
    fdp_start_utc   text COLLATE "C" NOT NULL,
    fdp_end_utc     text COLLATE "C",
    fdp_minutes     numeric,
    PRIMARY KEY (duty_id, crew_id)
);
CREATE INDEX spoolite_crew_fdp_crew ON spoolite_crew_fdp (crew_id, fdp_start_utc);

CREATE VIEW crew_flight AS
SELECT crew_id, role, function, flight_id, off_blocks_utc, on_blocks_utc, block_minutes
FROM spoolite_crew_flight
WHERE block_minutes IS NOT NULL;

CREATE VIEW crew_duty AS
SELECT crew_id, role, function, duty_id, duty_type, duty_start_utc, duty_end_utc,
       duty_minutes
FROM spoolite_crew_duty;

CREATE VIEW crew_fdp AS
SELECT crew_id, function, duty_id, fdp_start_utc, fdp_end_utc, fdp_minutes
FROM spoolite_crew_fdp;
