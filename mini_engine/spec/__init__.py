"""Speculative decoding on a real model: the drafters (DFLASH blocks, EAGLE chains and
trees), verification of a draft against the target's logits, and the simulated acceptance
that accounting-only runs draw instead. The algorithms' KV accounting lives in algos/."""
