"""Layer 4: time travel — forks, replays and their reports, diffs, views, export/import."""
