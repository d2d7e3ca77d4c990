"""The slots: each pool's PagedAllocator and the order of its free list, the SWA pool and its
full -> SWA map, the req_to_token rows, the page ledger (who holds which page), the change
logs a device mirror follows, and how much SGLang asks free before an allocation."""
