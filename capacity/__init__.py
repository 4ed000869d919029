"""Pure capacity knowledge shared by the control plane and kubesim: the GPU table, the model arithmetic
(weights, KV cache, vLLM's block budget, SGLang's token pool) and the roofline of one engine step.

Standard library only; imports neither `kubesim` nor the Django project, so both can import it without
breaking the layering (DESIGN.md). Figures come from reference/gpus-and-models.md and engines.md §5.
"""
