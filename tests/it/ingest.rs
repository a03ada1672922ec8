// Tests of spoolite ingest.
