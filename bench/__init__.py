"""Reproducible REST benchmark of the server (``make bench`` runs bench/run.py)."""
