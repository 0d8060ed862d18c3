"""DistributedDataParallel and a tensor-parallel layer on gcoll's libnccl.so.2,
checked against the same training on the NCCL that PyTorch ships.

    python3 torch_ddp_check.py train NPROCS OUT.pt   # one run, NCCL backend
    torchrun --standalone --nproc-per-node N torch_ddp_check.py torchrun OUT.pt
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
the whole batch, up to float32 rounding (the order of additions differs).
Under torchrun (RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous from the
launcher, as people run it) the column-parallel layer runs in
tensor-parallel groups of 2 made with dist.new_group (each a communicator
of its own, from a fresh unique id), while DDP averages over the world:
`compare` requires every parameter to agree within 1e-5 relative and exits
non-zero otherwise.
`compare` requires every parameter to agree within 1e-5 relative and exits
non-zero otherwise. Run it as tests/gpu/device_run.sh's `ddp` and `torchrun` steps do:
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


def tensor_parallel_group(rank, nprocs):
    """The tensor-parallel group of rank (pairs of consecutive ranks when
    the world is even and larger than 2, else the world), made as Megatron
    makes its groups: every rank creates every group, in the same order."""
    if nprocs <= 2 or nprocs % 2:
        return None, rank, nprocs
    mine = None
    for first in range(0, nprocs, 2):
        g = dist.new_group([first, first + 1])
        if first == rank - rank % 2:
            mine = g
    return mine, rank % 2, 2


def worker(rank, nprocs, port, out, result):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=nprocs,
                            device_id=torch.device("cuda", 0))
    result[rank] = run(rank, nprocs, 0, out)


def run(rank, nprocs, dev, out):
    """Trains, checks the column-parallel layer; 0 when it matched."""
    net = torch.nn.parallel.DistributedDataParallel(model().cuda(dev), device_ids=[dev])
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

    # Column-parallel linear: rank r of its tensor-parallel group holds
    # columns [r*k, (r+1)*k) of W.
    group, tp_rank, tp_size = tensor_parallel_group(rank, nprocs)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(33, DIM, generator=g).cuda()
    w = torch.randn(DIM, 8 * tp_size, generator=g).cuda()
    k = w.shape[1] // tp_size
    part = (x @ w[:, tp_rank * k:(tp_rank + 1) * k]).contiguous()
    gathered = torch.empty(tp_size, *part.shape, device="cuda")
    dist.all_gather_into_tensor(gathered, part, group=group)
    tp = torch.cat(list(gathered), dim=1)
    tp_err = (tp - x @ w).abs().max().item()
    tp_ok = tp_err <= 1e-4

    if rank == 0:
        torch.save({"params": [p.detach().cpu() for p in net.module.parameters()],
                    "losses": losses}, out)
    print(f"rank {rank}: NCCL {torch.cuda.nccl.version()}, preload "
          f"{os.environ.get('LD_PRELOAD', 'none')}: {STEPS} DDP steps, loss "
          f"{losses[0]:.4f} -> {losses[-1]:.6f}; column-parallel linear over {tp_size} "
          f"ranks{' (new_group)' if group is not None else ''} max error "
          f"{tp_err:.2e} ({'ok' if tp_ok else 'WRONG'})", flush=True)
    dist.destroy_process_group()
    return 0 if tp_ok else 1


def under_torchrun(out):
    """One process of a torchrun job: its rank, world and rendezvous come
    from the launcher's environment; local rank i drives GPU i (all GPU 0
    on a one-GPU machine, which only gcoll allows for several ranks)."""
    rank, nprocs = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=torch.device("cuda", dev))
    return run(rank, nprocs, dev, out)


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
    if len(sys.argv) == 3 and sys.argv[1] == "torchrun" and "RANK" in os.environ:
        sys.exit(under_torchrun(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    sys.exit("usage: torch_ddp_check.py train NPROCS OUT.pt | torchrun OUT.pt (under torchrun) "
             "| compare A.pt B.pt")
