"""The engines' vocabulary, defined once: each engine's flags and who may set them.

Pure (standard library only): the manifest renderer (`apps.catalog.engines`), the tenant-argument
policy and kubesim's engine parsers (`kubesim.engines.flags`) all read these tables, so a flag added
here is both rendered and understood (vLLM 0.32.0 from its own parser, the `engines` extra; SGLang 0.5.23 from
reference/engines.md).
"""
