"""torch.distributed: DistributedDataParallel over gloo with the model
compiled by backend="kiln", two processes on 127.0.0.1. After N steps the
parameters must equal single-process training on the combined batch (DDP
averages gradients, so the combined batch's mean loss).

DDP wraps the compiled module (DDP(torch.compile(model))): in torch 2.13,
torch.compile(DDP(model)) graph-breaks inside DDP's own forward and the
model never reaches a backend, so that form would test nothing."""
import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STEPS = 20


def make_model():
    torch.manual_seed(0)
    # About 2 MB of parameters: with 1 MB buckets the DDP optimizer splits
    # the graph into several pieces.
    return torch.nn.Sequential(torch.nn.Linear(16, 256), torch.nn.GELU(), torch.nn.Linear(256, 1024),
                               torch.nn.ReLU(), torch.nn.Linear(1024, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 4))


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(STEPS)]


def _worker(rank, world, port, out_path):
    import kiln.dynamo

    compiled_graphs = []  # counts graphs kiln compiled in this process
    compile_graph = kiln.dynamo.compile_graph  # where the backend looks it up
    kiln.dynamo.compile_graph = lambda ctx, *a: compiled_graphs.append(1) or compile_graph(ctx, *a)

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = make_model()
    compiled = torch.nn.parallel.DistributedDataParallel(torch.compile(model, backend="kiln"),
                                                         bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches():
        xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(compiled(xs), ys).backward()
        opt.step()
    if rank == 0:
        torch.save({"params": [p.detach() for p in model.parameters()],
                    "kiln_graphs": len(compiled_graphs)}, out_path)
    dist.destroy_process_group()
    # Not the interpreter's teardown: freeing the DDP module there once hung
    # in torch's gloo (~ProcessGroupGloo joins its worker with the GIL held
    # while the worker, destroying a finished allreduce, waits for the GIL).
    # Everything this test checks is saved above.
    os._exit(0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_over_gloo_matches_single_process(tmp_path):
    out = str(tmp_path / "params.pt")
    mp.start_processes(_worker, args=(2, _free_port(), out), nprocs=2, join=True, start_method="spawn")
    saved = torch.load(out)
    assert saved["kiln_graphs"] >= 2, "forward and backward should both be compiled by kiln"
    got = saved["params"]
    ref = make_model()
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        opt.step()
    for p, q in zip(got, ref.parameters()):
        torch.testing.assert_close(p, q.detach(), rtol=1e-4, atol=1e-5)
