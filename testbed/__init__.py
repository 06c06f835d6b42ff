"""What emulates a cluster: workload programs, the local testbed, experiment runners."""
