"""Built-in non-channel plugins (providers, tools), registered through entry points."""
