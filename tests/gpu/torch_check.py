"""PyTorch's NCCL backend on gcoll's libnccl.so.2, on a real GPU.

    LD_PRELOAD=.../libnccl.so.2 python3 torch_check.py [NPROCS]

NPROCS processes (default 2) all drive GPU 0: real NCCL refuses that
("Duplicate GPU detected"), gcoll allows it, so a run that gets as far as
a collective is already on gcoll's library; every process also checks that
ncclGetVersion's answer came from a library named in LD_PRELOAD.

Each process builds every rank's input from a seeded generator on the CPU,
so the reference (a serial reduction in float64 on the CPU) is independent
of the library under test. all_reduce (sum/max/min/product/avg),
broadcast, all_gather_into_tensor, reduce_scatter_tensor and reduce, on
float32/float16/bfloat16/float64/int32/int64/uint8, sizes 0, 1, primes and
sizes off the chunk boundaries up to 4M elements; a new subgroup (both
ranks, reversed order) too. Floating-point sums are compared with a
tolerance scaled to the type (the order of additions differs); integers
exactly. Prints one line per rank and exits non-zero on any mismatch.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [0, 1, 2, 7, 97, 1023, 4099, 65537, 1 << 20, (1 << 22) + 13]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
          torch.int64, torch.uint8]
OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
       "prod": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.AVG}


def make_input(rank, n, dtype, op, seed):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        if op == "prod":
            return (torch.rand(n, generator=g, dtype=torch.float64) + 0.5).to(dtype)
        return (torch.rand(n, generator=g, dtype=torch.float64) * 8 - 4).to(dtype)
    hi = 4 if op == "prod" else 100
    if dtype == torch.uint8:
        hi = 3 if op == "prod" else 60
    return torch.randint(0, hi, (n,), generator=g, dtype=torch.int64).to(dtype)


def reference(inputs, op, dtype):
    x = torch.stack([t.to(torch.float64 if dtype.is_floating_point else torch.int64)
                     for t in inputs])
    if op == "sum":
        r = x.sum(0)
    elif op == "avg":
        r = x.sum(0) / len(inputs)
    elif op == "max":
        r = x.max(0).values if x.shape[1] else x.sum(0)
    elif op == "min":
        r = x.min(0).values if x.shape[1] else x.sum(0)
    else:
        r = x.prod(0)
    return r.to(dtype)


def close(got, want, dtype, nranks):
    got = got.cpu()
    if not dtype.is_floating_point:
        return int((got != want).sum())
    eps = {torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.float32: 1e-5,
           torch.float64: 1e-12}[dtype]
    g, w = got.to(torch.float64), want.to(torch.float64)
    tol = eps * nranks * (w.abs() + 4)
    return int(((g - w).abs() > tol).sum())


def worker(rank, nprocs, port, result):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=nprocs,
                            device_id=torch.device("cuda", 0))
    version = torch.cuda.nccl.version()
    lib = os.environ.get("LD_PRELOAD", "")
    maps = open("/proc/self/maps").read()
    ours = lib and lib in maps
    checks = wrong = 0
    seed = 0
    groups = [dist.group.WORLD, dist.new_group(list(reversed(range(nprocs))))]
    for group in groups:
        for dtype in DTYPES:
            for n in SIZES:
                for op in OPS:
                    if op == "avg" and not dtype.is_floating_point:
                        continue
                    if op == "prod" and n > 4099:
                        continue
                    seed += 1
                    inputs = [make_input(r, n, dtype, op, seed) for r in range(nprocs)]
                    t = inputs[rank].cuda()
                    dist.all_reduce(t, op=OPS[op], group=group)
                    bad = close(t, reference(inputs, op, dtype), dtype, nprocs)
                    if bad:
                        print(f"rank {rank}: all_reduce {op} {dtype} n={n}: {bad} wrong",
                              flush=True)
                    checks += 1
                    wrong += bad
                if n == 0:
                    continue
                seed += 1
                inputs = [make_input(r, n * nprocs, dtype, "sum", seed) for r in range(nprocs)]
                root = seed % nprocs
                t = inputs[rank].cuda()
                dist.broadcast(t, src=root, group=group)
                wrong += close(t, inputs[root], dtype, 1)
                out = torch.empty(n * nprocs, dtype=dtype, device="cuda")
                dist.all_gather_into_tensor(out, inputs[rank][:n].cuda(), group=group)
                wrong += close(out, torch.cat([x[:n] for x in inputs]), dtype, 1)
                rs = torch.empty(n, dtype=dtype, device="cuda")
                dist.reduce_scatter_tensor(rs, inputs[rank].cuda(), group=group)
                want = reference(inputs, "sum", dtype)[rank * n:(rank + 1) * n]
                wrong += close(rs, want, dtype, nprocs)
                t = inputs[rank].cuda()
                dist.reduce(t, dst=root, group=group)
                if rank == root:
                    wrong += close(t, reference(inputs, "sum", dtype), dtype, nprocs)
                checks += 4
    torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {rank}: torch {torch.__version__}, NCCL version {version} from "
          f"{'gcoll (' + lib + ')' if ours else 'a library not in LD_PRELOAD'}: "
          f"{checks} checks, {wrong} wrong", flush=True)
    dist.destroy_process_group()
    result[rank] = 0 if wrong == 0 and ours else 1


def main():
    nprocs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    port = 29500 + os.getpid() % 1000
    result = mp.Manager().list([1] * nprocs)
    mp.spawn(worker, args=(nprocs, port, result), nprocs=nprocs, join=True)
    sys.exit(0 if all(r == 0 for r in result) else 1)


if __name__ == "__main__":
    main()
