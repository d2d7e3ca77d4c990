"""What a backend sees and returns: the StepBatch it reads, the Backend protocol with its
factory, and the accounting-only backend of every model-none run."""
