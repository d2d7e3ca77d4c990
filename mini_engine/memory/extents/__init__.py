"""A request's extent and its writers: growth (prefill, decode, speculative reservations,
all-or-nothing over both pools), a reservation past its row (K4's overflow), the SWA
cursor (window eviction, PD prealloc) and the release of a finished request's pages."""
