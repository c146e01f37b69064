"""Triton model configuration (config.pbtxt): :mod:`.triton` parses and checks it, :mod:`.signatures`
checks a configuration given after import against the validated versions."""
