"""Thin trio drivers: they move bytes and time between the OS and the sans-IO cores."""
