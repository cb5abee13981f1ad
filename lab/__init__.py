"""`isrwatch lab`: a real Kafka cluster on loopback (3.9 in ZooKeeper mode, 4.x in KRaft mode), with faults, from
Maven jars.

jars: provisioning by Maven coordinates into the tools directory (the lab and Spark's Kafka source both use it);
record: lab.json; config: what a lab runs and its configuration files; ports; truth: the cluster's partitions,
registrations and controller (ZooKeeper, or the admin API with kraft); startup: starting the nodes of either mode;
cluster: up and down; faults: what `isrwatch lab fault` does; load, story; command: the CLI.
"""
