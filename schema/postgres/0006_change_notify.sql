-- spoolite PostgreSQL schema 6: a commit that writes events tells the change
-- feed's followers.
--
-- Each statement that inserts or updates rows of spoolite_event queues a
-- notification on the channel spoolite_changes; PostgreSQL delivers it, once per
-- transaction, when the transaction commits, to every session that has run
-- `LISTEN spoolite_changes`. A follower (`spoolite changes --follow`) listens and
-- reads the feed when told, so it neither polls nor wakes while nothing is
-- written. The trigger belongs to the table, so every writer (the daemon, ingest,
-- copy-db) notifies without doing anything.

CREATE FUNCTION spoolite_notify_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('spoolite_changes', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER spoolite_event_changes
AFTER INSERT OR UPDATE ON spoolite_event
FOR EACH STATEMENT EXECUTE FUNCTION spoolite_notify_changes();
