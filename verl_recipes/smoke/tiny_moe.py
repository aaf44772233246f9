"""The experts of the tiny Qwen3 MoE models (verl_recipes/random_models.py TINY: qwen3_moe, qwen3_vl_moe).

8 experts, top 2 (the real models: 128, top 8), each a 128-wide SwiGLU (96-wide in the tiny Qwen3-VL-MoE),
in every layer (decoder_sparse_step 1, no dense layer), as Qwen3-30B-A3B and Qwen3-VL-30B-A3B. The counts divide the
tiny two-GPU layouts: 8 experts over EP 2, 4 heads and 2 KV heads over TP 2, 4 layers over PP 2. Megatron runs them
as grouped GEMMs (configs/megatron/moe).
Router weights are renormalised over the top k (norm_topk_prob), as in both hub configs: vLLM's Qwen3-VL-MoE reads the
key from the text config, which transformers' Qwen3VLMoeTextConfig does not default, so without it the engine failed
to start (2026-11-26).
"""

MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, decoder_sparse_step=1, mlp_only_layers=[],
           norm_topk_prob=True)
