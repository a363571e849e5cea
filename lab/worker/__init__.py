"""Work that outlives a request: the durable job ledger (ledger), its jobs and their worker (jobs),
the steps a job runs after training, which the modules above register (steps), and where a job
runs: a child process or Ray (executors). May import everything below it; never lab.sweeps, lab.cli
or lab.ui, which sit above it.
"""
