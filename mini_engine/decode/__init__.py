"""One decode step: plan (reserve, build the batch), forward, land the outputs; and the
running decode batch's arrays."""
