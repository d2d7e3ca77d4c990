"""The reference engine: SGLang's own scheduler loop run on a CPU (``kvbench run --engine sglang``).

The installed SGLang's ``Scheduler.event_loop_normal`` or ``event_loop_overlap`` runs
with its own batch forming (``get_next_batch_to_run`` and what it calls), its own
``Req`` and ``ScheduleBatch``, allocator, request rows, prefix tree and result
processing (``SchedulerBatchResultProcessor``), bound to a small object that holds them
(scheduler.py). Only the forward stands in (forward.py): it returns the output ids the
mini engine's run of the same config produced, so the tree's keys match. What SGLang
imports but never calls on this path is a named stand-in (loader.py). The run's figures
are read from SGLang's own components after every loop iteration (sampler.py) and come
back as a result row of the mini engine's format (run.py). A PD workload runs as a
decode node: SGLang's decode loop and its prealloc and transfer queues (pd_decode.py).
docs/reference.md.
"""
