"""`isrwatch lab`: a real Kafka 3.9 cluster in ZooKeeper mode on loopback, with faults, from Maven jars.

jars: provisioning by Maven coordinates into the tools directory (the lab and Spark's Kafka source both use it);
cluster: configs, start and stop, lab.json; faults: what `isrwatch lab fault` does; command: the CLI.
"""
