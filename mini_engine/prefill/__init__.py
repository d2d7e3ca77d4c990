"""One prefill step: the admitted chunks forwarded, their lengths committed, a finished
prompt's first output token, the prefix tree's checkpoints."""
