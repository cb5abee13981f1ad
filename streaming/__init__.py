"""isrwatch's Spark shell: sources, the stateful query, sinks, and the command line."""
