"""Who runs this step: the queues, admission (SGLang's PrefillAdder and batch_is_full,
its admission delay, the PD decode side's prealloc, kvbench's page estimate), the
prefix match at admission, the decode reservation with retraction and the SWA window
eviction, what an overlap plan covers, and multi-turn sessions."""
