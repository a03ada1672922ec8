-- spoolite schema 13: one index finds a flight's rows, a kind's of it and a slot's.
--
-- Schema 12 found a slot's rows through an index of their own, (flight_id,
-- event_kind, slot, source_revision): one more b-tree of every slotted row to
-- build and keep, for the few look-ups of the slots a batch names more than
-- once or that hold a stored row. The flight index now leads with the same
-- columns, (flight_id, event_kind, slot, retracted, instant_utc), so it answers
-- both: a flight's rows (flight_id), its rows of a kind (flight_id, event_kind:
-- the first or last live instant of a kind, read from the index alone) and a
-- slot's rows (flight_id, event_kind, slot).

DROP INDEX spoolite_event_slot;
DROP INDEX spoolite_event_flight;
CREATE INDEX spoolite_event_flight
    ON spoolite_event (flight_id, event_kind, slot, retracted, instant_utc);
