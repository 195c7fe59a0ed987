"""Contract suites: every adapter of a port passes the same tests."""
