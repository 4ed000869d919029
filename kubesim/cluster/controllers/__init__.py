"""The controllers of the simulated cluster: informers and work queues, the scheduler loop, workload
controllers (Deployment, ReplicaSet, StatefulSet, LeaderWorkerSet), Endpoints, quota, disruption, HPA, nodes."""
