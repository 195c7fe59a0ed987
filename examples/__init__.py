"""Examples of extending the crawler (docs/extraction-hook.md)."""
