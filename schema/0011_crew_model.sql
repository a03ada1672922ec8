-- spoolite schema 11: the crew model of the contract's *Crew hours and limits*.
--
-- Each crew row now says the member's function (flight_crew or cabin_crew, as the
-- listing that gives the crew says) and each duty its type (the duty_type of its
-- first live duty_start's payload). A flight's crew is that of its live
-- crew_assignment event with the latest instant when it has one, else that of its
-- first live off_blocks. Every flight with a live off-blocks has its crew rows,
-- with or without block time: on_blocks_utc is NULL without a live on-blocks, and
-- block_minutes NULL without block time (no on-blocks, or one before the
-- off-blocks); the view crew_flight shows the rows with block time, as before, and
-- the others serve the flight duty periods and the data quality counts.
--
-- spoolite_crew_fdp holds one row per crew member of each duty that has a flight
-- duty period for them (14 CFR 117.3, ORO.FTL.105): an airport standby whole; a
-- flight or ground duty from its start to the on-blocks of the last flight whose
-- off-blocks lies within the duty and on which the member is operating (to the
-- duty's end where that flight has no block time); none for a home standby, a
-- reserve, or a duty without such a flight. Each batch computes again the periods
-- of the duties whose crew rows it wrote, and of the duties of the crew members
-- whose flights it wrote, around those flights' off-blocks.
--
-- The crew rows are spoolite's to compute (src/crew.rs): this migration drops and
-- creates the crew tables, and spoolite then builds the rows of every stored event
-- in the same transaction, as a batch would have written them. New columns come
-- last, so that a row written by position in schema 10's order still fits.
--
-- flight_times shows NULL block or airborne minutes where the end is before the
-- start (an on-blocks on the wrong date, say), instead of a negative figure.

DROP VIEW flight_times;
CREATE VIEW flight_times AS
SELECT flight_id,
       off_blocks_utc,
       takeoff_utc,
       landing_utc,
       on_blocks_utc,
       CASE WHEN block_minutes >= 0 THEN block_minutes END AS block_minutes,
       CASE WHEN airborne_minutes >= 0 THEN airborne_minutes END AS airborne_minutes
FROM spoolite_flight
WHERE coalesce(off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc) IS NOT NULL;

DROP VIEW crew_flight;
DROP VIEW crew_duty;
DROP TABLE spoolite_crew_flight;
DROP TABLE spoolite_crew_duty;

CREATE TABLE spoolite_crew_flight (
    -- A spoolite_flight.ref, written in the transaction that writes its flight row.
    flight_ref      INTEGER NOT NULL,
    crew_id         TEXT NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('operating', 'positioning')),
    -- That flight's flight_id.
    flight_id       TEXT NOT NULL,
    off_blocks_utc  TEXT NOT NULL,
    on_blocks_utc   TEXT,
    block_minutes   REAL,
    function        TEXT NOT NULL DEFAULT 'flight_crew'
                        CHECK (function IN ('flight_crew', 'cabin_crew')),
    PRIMARY KEY (flight_ref, crew_id)
) WITHOUT ROWID;
CREATE INDEX spoolite_crew_flight_crew ON spoolite_crew_flight (crew_id, off_blocks_utc);
CREATE INDEX spoolite_crew_flight_time ON spoolite_crew_flight (off_blocks_utc);

CREATE TABLE spoolite_crew_duty (
    -- The spoolite_flight.ref of the duty's id.
    duty_ref        INTEGER NOT NULL,
    crew_id         TEXT NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('operating', 'positioning')),
    -- That id.
    duty_id         TEXT NOT NULL,
    duty_start_utc  TEXT NOT NULL,
    duty_end_utc    TEXT,
    duty_minutes    REAL,
    function        TEXT NOT NULL DEFAULT 'flight_crew'
                        CHECK (function IN ('flight_crew', 'cabin_crew')),
    duty_type       TEXT NOT NULL DEFAULT 'flight_duty'
                        CHECK (duty_type IN ('flight_duty', 'airport_standby', 'home_standby',
                                             'reserve', 'ground_duty')),
    PRIMARY KEY (duty_ref, crew_id)
) WITHOUT ROWID;
CREATE INDEX spoolite_crew_duty_crew ON spoolite_crew_duty (crew_id, duty_start_utc);
CREATE INDEX spoolite_crew_duty_time ON spoolite_crew_duty (duty_start_utc);
-- The open duties and those of over two days, few: with the crew index's range of
-- the two days before an instant, they find every duty of a crew member that holds
-- that instant (whose period a flight there may end) without reading every duty of
-- theirs.
CREATE INDEX spoolite_crew_duty_long ON spoolite_crew_duty (crew_id, duty_start_utc)
    WHERE duty_end_utc IS NULL OR duty_minutes > 2880;

-- Keyed by crew member and start, so that one crew member's periods in a time
-- range are a range of the table itself, and every duty's periods, computed one
-- crew member at a time in start order, go in at the table's end; a batch finds a
-- duty's periods by the duty's number.
CREATE TABLE spoolite_crew_fdp (
    crew_id         TEXT NOT NULL,
    fdp_start_utc   TEXT NOT NULL,
    -- The duty's spoolite_flight.ref and id, as in spoolite_crew_duty.
    duty_ref        INTEGER NOT NULL,
    duty_id         TEXT NOT NULL,
    function        TEXT NOT NULL CHECK (function IN ('flight_crew', 'cabin_crew')),
    fdp_end_utc     TEXT,
    fdp_minutes     REAL,
    PRIMARY KEY (crew_id, fdp_start_utc, duty_ref)
) WITHOUT ROWID;
CREATE INDEX spoolite_crew_fdp_duty ON spoolite_crew_fdp (duty_ref);

CREATE VIEW crew_flight AS
SELECT crew_id, role, function, flight_id, off_blocks_utc, on_blocks_utc, block_minutes
FROM spoolite_crew_flight
WHERE block_minutes IS NOT NULL;

CREATE VIEW crew_duty AS
SELECT crew_id, role, function, duty_id, duty_type, duty_start_utc, duty_end_utc, duty_minutes
FROM spoolite_crew_duty;

CREATE VIEW crew_fdp AS
SELECT crew_id, function, duty_id, fdp_start_utc, fdp_end_utc, fdp_minutes
FROM spoolite_crew_fdp;
