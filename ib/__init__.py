"""An InfiniBand-style unreliable-datagram fabric emulated over UDP (switches, a subnet
manager with its subnet administration, IPoIB endpoints on TAP devices).  It follows
the IBA and IPoIB layouts in ../shared/spec/servernet-ipoib.md Part 2; it is an
emulation, not InfiniBand."""
