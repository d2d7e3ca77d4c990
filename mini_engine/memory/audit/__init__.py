"""The audit: the violation record (record.py), and the invariants K1-K14 of DESIGN.md
section 2 as state checks over a KVManager (pool_checks.py, tree_checks.py, check_all.py)."""
