"""Apps of the shared core: the demo (`./gsn demo`) and the network-namespace harness
the demo, the namespace tests and the benches use."""
