-- spoolite schema 10: block hours per tail of a month, the analysts' first sum,
-- written plainly (README, "Tables"), reads two indexes and no row.
--
-- The query joins the month's live off-blocks events to their flights and reads
-- each event's payload for its tail. Through the live rows' index each of those
-- events cost a read of its row, and each flight a look-up of its id followed by a
-- read of its row: at 10M events (90,000 off-blocks a month) about 265,000 reads of
-- a page, at random (a first ingest writes rows in key order, not time order), and
-- 1.9 s. So:
--
-- * The live off-blocks events get an index of their own that holds what the query
--   reads of them (the columns of the live rows' index, then flight_id and
--   payload): a month of them is one range of it, in time order. It holds one
--   event in six, the payload included (about 180 MB at 10M events).
-- * Flights get an index on (flight_id, off_blocks_utc, block_minutes): the join's
--   look-up of a flight by its id finds its off-blocks and minutes there.
--
-- Both are built by one sort each of the rows already stored.

CREATE INDEX spoolite_event_off_blocks
    ON spoolite_event (event_kind, instant_utc, retracted, flight_id, payload)
    WHERE event_kind = 'off_blocks' AND retracted = 0;

CREATE INDEX spoolite_flight_block ON spoolite_flight (flight_id, off_blocks_utc, block_minutes);
