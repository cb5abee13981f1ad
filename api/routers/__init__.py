"""One router per resource: partitions, brokers, history, alter-partitions, metrics (behind the token) and health
(open)."""
