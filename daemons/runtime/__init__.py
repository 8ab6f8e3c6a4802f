"""Daemon plumbing: config, logging, sd_notify, control sockets, CLI helpers."""
