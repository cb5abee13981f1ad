"""The simulated Kafka cluster (a pure model: config, faults, model) and what drives it in real time
(sinks, pacing)."""
