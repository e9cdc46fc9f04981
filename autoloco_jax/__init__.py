"""autoloco_jax: communication-efficient distributed LLM training in JAX.

Workers live on a leading replica axis mapped onto a device mesh; DiLoCo,
AutoLoCo, DDP (and later NoLoCo, GASLoC) are small compositions of the same
pieces: the inner loop, the outer transform, the interval controller.
"""

__version__ = "0.1.0"
