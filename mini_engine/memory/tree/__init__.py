"""SGLang's radix prefix cache: the full tree (radix_cache.py) and the SWA-aware one
(swa_radix.py, its locks and eviction), each with the part of KVManager that moves pages
between a request's row and the tree (prefix.py, swa_prefix.py)."""
