"""DistributedDataParallel and a tensor-parallel layer on gcoll's libnccl.so.2,
checked against the same training on the NCCL that PyTorch ships.

    python3 torch_ddp_check.py train NPROCS OUT.pt   # one run, NCCL backend
    python3 torch_ddp_check.py compare A.pt B.pt     # same model twice?

`train` trains a small MLP with DistributedDataParallel for STEPS steps on
a fixed global batch sequence, each of NPROCS processes taking its slice of
every global batch (all on GPU 0, which only gcoll allows for NPROCS > 1);
then checks a column-parallel linear layer (each rank holds a slice of the
weight's columns, torch.distributed.all_gather_into_tensor joins the
outputs) against the whole layer computed locally. Rank 0 saves the final
parameters and the losses.

DDP averages the ranks' gradients, and the slices are equal, so NPROCS
processes on gcoll must train the same model as one process on NCCL with
the whole batch, up to float32 rounding (the order of additions differs):
`compare` requires every parameter to agree within 1e-5 relative and exits
non-zero otherwise. Run it as tests/gpu/device_run.sh's `ddp` step does:
once with LD_PRELOAD=gcoll's libnccl.so.2 and 2 processes, once without it
and 1 process.
"""
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STEPS, BATCH, DIM, HIDDEN = 30, 64, 96, 256


def batches():
    g = torch.Generator().manual_seed(22)
    w_true = torch.randn(DIM, 1, generator=g) / DIM ** 0.5  # targets of unit variance
    for _ in range(STEPS):
        x = torch.randn(BATCH, DIM, generator=g)
        yield x, x @ w_true + 0.1 * torch.randn(BATCH, 1, generator=g)


def model():
    torch.manual_seed(14)
    return torch.nn.Sequential(torch.nn.Linear(DIM, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, 1))


def worker(rank, nprocs, port, out, result):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=nprocs,
                            device_id=torch.device("cuda", 0))
    net = torch.nn.parallel.DistributedDataParallel(model().cuda(), device_ids=[0])
    opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
    per = BATCH // nprocs
    losses = []
    for x, y in batches():
        x, y = x[rank * per:(rank + 1) * per].cuda(), y[rank * per:(rank + 1) * per].cuda()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        l = loss.detach().clone()
        dist.all_reduce(l, op=dist.ReduceOp.AVG)
        losses.append(l.item())

    # Column-parallel linear: rank r holds columns [r*k, (r+1)*k) of W.
    g = torch.Generator().manual_seed(7)
    x = torch.randn(33, DIM, generator=g).cuda()
    w = torch.randn(DIM, 8 * nprocs, generator=g).cuda()
    k = w.shape[1] // nprocs
    part = (x @ w[:, rank * k:(rank + 1) * k]).contiguous()
    gathered = torch.empty(nprocs, *part.shape, device="cuda")
    dist.all_gather_into_tensor(gathered, part)
    tp = torch.cat(list(gathered), dim=1)
    tp_err = (tp - x @ w).abs().max().item()
    tp_ok = tp_err <= 1e-4

    if rank == 0:
        torch.save({"params": [p.detach().cpu() for p in net.module.parameters()],
                    "losses": losses}, out)
    print(f"rank {rank}: NCCL {torch.cuda.nccl.version()}, preload "
          f"{os.environ.get('LD_PRELOAD', 'none')}: {STEPS} DDP steps, loss "
          f"{losses[0]:.4f} -> {losses[-1]:.6f}; column-parallel linear max error "
          f"{tp_err:.2e} ({'ok' if tp_ok else 'WRONG'})", flush=True)
    dist.destroy_process_group()
    result[rank] = 0 if tp_ok else 1


def train(nprocs, out):
    port = 29500 + os.getpid() % 1000
    result = mp.Manager().list([1] * nprocs)
    mp.spawn(worker, args=(nprocs, port, out, result), nprocs=nprocs, join=True)
    return 0 if all(r == 0 for r in result) else 1


def compare(a_path, b_path):
    a, b = torch.load(a_path), torch.load(b_path)
    # NaN compares false with everything: a diverged run must fail, not
    # slip through a max().
    finite = all(torch.isfinite(p).all().item() for p in a["params"] + b["params"]) and \
        all(math.isfinite(x) for x in a["losses"] + b["losses"])
    learned = finite and a["losses"][-1] < 0.5 * a["losses"][0]
    worst = float("inf")
    if finite and len(a["params"]) == len(b["params"]):
        worst = max(((pa - pb).abs() / (pb.abs() + 1e-3)).max().item()
                    for pa, pb in zip(a["params"], b["params"]))
    same = finite and learned and worst <= 1e-5
    print(f"final loss {a['losses'][-1]:.6f} ({a_path}) vs {b['losses'][-1]:.6f} ({b_path}); "
          f"largest relative parameter difference {worst:.2e}; "
          f"{'finite' if finite else 'NOT FINITE'}, {'learned' if learned else 'DID NOT LEARN'}: "
          f"{'same' if same else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "train":
        sys.exit(train(int(sys.argv[2]), sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    sys.exit("usage: torch_ddp_check.py train NPROCS OUT.pt | compare A.pt B.pt")
