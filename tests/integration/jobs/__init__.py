"""User jobs written against `pipelines.api` for the integration tests (loaded by `module:function`)."""
