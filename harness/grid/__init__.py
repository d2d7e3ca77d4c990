"""A suite as a pytest run: the suite files, the --filter, the grid plugin (one test per config,
the controller that writes the rows), one config's measure and record, the run lifecycle,
`kvbench sweep` and the sweep's own verdict.

Layer order and rule: ARCHITECTURE.md, "Harness layers"."""
