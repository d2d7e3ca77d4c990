"""The real model: a Llama / Qwen3-style transformer over the paged KV cache.

config        ModelConfig, named shapes ('tiny', 'qwen3-0.6b', 'llama-3.1-8b'), layer patterns
layers        RMSNorm, RoPE, SwiGLU, attention projections, seeded init
attn_meta     where each sequence's queries and keys live (the mask rule)
attention_*   paged attention: torch reference, Triton kernel
transformer   forward over the paged cache + dense reference forward; KVCache
draft*        the drafter core shared by EAGLE and DFLASH, its batched inputs
loader        local Hugging Face checkpoints (CheckpointError)
backend       ModelBackend: the engine's backend protocol
cuda_graph    CUDA graphs for greedy plain decode on a GPU
"""
