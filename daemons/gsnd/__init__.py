"""gsnd: one GSN endpoint port (link, ULA, Admin, ULP socket, control socket)."""
