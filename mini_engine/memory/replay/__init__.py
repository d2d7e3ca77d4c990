"""A trace run again (kvbench replay): every allocator call on fresh allocators, the planning
records from the sizing formulas, the tree calls on fresh trees; each field that differs is
a divergence."""
