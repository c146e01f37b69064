"""Progressive rollouts of a model's new version (docs/rollouts.md "Progressive rollouts")."""
