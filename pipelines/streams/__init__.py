"""Long-running elastic stream jobs: their spec, folders, control channel, metrics and runner."""
