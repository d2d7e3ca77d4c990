"""``kvbench conform``: a kvbench allocation trace replayed on SGLang's own code.

* check.py: the replay (allocator calls, prepare, swa_prealloc; the first divergence
  stops it), the report and its lines, and SGLang's allocator and sizing modules loaded;
* versions.py: the SGLang release a trace's profile names, another refused;
* tree.py: the prefix tree's records on SGLang's RadixCache (or UnifiedRadixCache with
  the FULL component), compiled on the CPU by sglang_radix.py;
* swa_tree.py: the SWA-aware tree's records on UnifiedRadixCache (FULL + SWA), whose
  serving stack sglang_swa_radix.py imports on the CPU behind stand-ins.

The reference engine (harness.reference) loads SGLang's scheduler through the same
stand-ins (sglang_swa_radix.stand_in), so this package sits below it in the layers.
"""
