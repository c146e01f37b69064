"""Webhooks of teams: subscriptions, deliveries, attempts (docs/webhooks.md)."""
