"""GSN (HIPPI-6400) emulation: shared core and the gsnd / gsn-switch daemons."""
