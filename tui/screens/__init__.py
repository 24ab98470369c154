"""Modal screens: help, confirmation, prompts for engine actions, details."""
