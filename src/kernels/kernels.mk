# src/kernels: collective algorithms on primitives, reduction loops, the host
# executor. Knows nothing of plans, sockets or processes.
