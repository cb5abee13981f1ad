"""The processes every shell starts and stops (Linux): `proc` reads /proc (a process's state and start time, its
descendants), `child` runs commands that never outlive their parent (the demo, the benchmarks), `detached` starts
processes that outlive the command that started them and finds them again by pid and start time (the lab's
brokers, ZooKeeper, producer and fault helpers, recorded in lab.json)."""
