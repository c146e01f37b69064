"""What the web UI and the management API share."""
