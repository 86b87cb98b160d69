"""Test helpers shipped with the gateway: a fake OpenAI-compatible LLM server and a pytest
plugin (``gateway.testing.plugin``) for plugin authors.

May import: every part of ``gateway``; the gateway never imports it.
"""
