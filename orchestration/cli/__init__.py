"""The `esp` command line; its root app is assembled in `orchestration.cli.main`."""
