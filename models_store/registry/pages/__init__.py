"""The registry's web pages beyond views.py: version comparison, model delete, an ensemble's steps, shadow traffic."""
