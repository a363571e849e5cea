"""A model and how it decodes: the builder that assembles a model from its plugins (model),
decoding with the KV cache (generate), the decoders' sampling weights (sampling), and FLOPs, device
peaks and MFU (flops). May import the ground floor (errors, registry, settings, config) and torch.
"""
