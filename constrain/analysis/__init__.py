"""Questions about a grammar's language that drivers ask before they commit: can a partial output with holes still be completed, and with what."""
