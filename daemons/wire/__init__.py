"""Pure codecs.  Nothing in this package imports trio, opens sockets or reads the clock."""
