"""One router per resource: partitions, brokers, history, metrics (behind the token) and health (open)."""
