"""One config on this machine: the engine and workload built from a config dict, run, turned
into a row; the hardware and devices it runs on; its bounds and capacity.

Layer order and rule: ARCHITECTURE.md, "Harness layers"."""
