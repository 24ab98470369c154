"""Scenarios: stories the reference engine plays against a real database, printing one JSON line."""
