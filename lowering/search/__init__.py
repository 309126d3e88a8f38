"""Schedule spaces and the search over them (the auto-scheduler)."""
