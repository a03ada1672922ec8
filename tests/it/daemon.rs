// Tests of the spoolite run daemon.
