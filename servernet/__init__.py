"""ServerNet SAN emulated over UDP (spec servernet-ipoib.md Part 1): the packet codec,
one router process per fabric (X, Y), and end nodes with a BTE, an AVT and per-path
state machines."""
