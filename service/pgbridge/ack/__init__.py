"""Which LSN is safe to confirm to Postgres, and when to tell it."""
