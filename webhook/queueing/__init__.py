"""Queue mode: the controller that admits waiting workloads, preemption and reclaim."""
