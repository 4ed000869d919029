"""The engines' vocabulary, defined once: each engine's flags and who may set them.

Pure (standard library only): the manifest renderer (`apps.catalog.engines`), the tenant-argument
policy and kubesim's engine parsers (`kubesim.engines.flags`) all read these tables, so a flag added
here is both rendered and understood (reference/engines.md: vLLM 0.33, SGLang 0.5.23).
"""
