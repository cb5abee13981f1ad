"""The HTTP shell over the store: REST under /v1, /metrics, health probes and the status page."""
