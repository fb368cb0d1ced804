"""Real GPU failures, one per mode (see gpu-failures.toml). Each one goes through the real library
so the log holds exactly what users see: PyTorch's, Triton's, NCCL's and the CUDA runtime's own
messages, and the process ends the way it would in the field."""

import os
import sys


def torch_oom():
    import torch

    print("allocating 1 TiB on", torch.cuda.get_device_name(0), flush=True)
    torch.empty(1 << 40, dtype=torch.uint8, device="cuda")


def torch_oom_fragmented():
    # Fill the card in 4 GiB steps, as a growing KV cache would, until the allocator gives up.
    import torch

    held = []
    while True:
        held.append(torch.empty(4 << 30, dtype=torch.uint8, device="cuda"))
        print(f"holding {len(held) * 4} GiB", flush=True)


def device_assert():
    import torch

    table = torch.arange(10, device="cuda")
    index = torch.tensor([20], device="cuda")
    print(table[index].sum().item())


def triton_illegal():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def store(ptr, offset):
        tl.store(ptr + offset, 42)

    x = torch.zeros(16, dtype=torch.int32, device="cuda")
    store[(1,)](x, 1 << 40)
    torch.cuda.synchronize()
    print(x.sum().item())


def segfault():
    import ctypes

    import torch

    torch.zeros(1, device="cuda")
    print("GPU ready; reading address 0", flush=True)
    ctypes.string_at(0)


def triton_compile_error():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def copy(src, dst):
        offsets = tl.arange(0, 3)
        tl.store(dst + offsets, tl.load(src + offsets))

    x = torch.ones(4, device="cuda")
    y = torch.empty_like(x)
    copy[(1,)](x, y)
    torch.cuda.synchronize()


def missing_module():
    import torch

    print("torch", torch.__version__, flush=True)
    import flashinfer_missing_kernels  # noqa: F401


def _nccl_rank(rank, port):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", 0))
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print("rank", rank, "sum", t.item(), flush=True)
    dist.destroy_process_group()


def nccl_duplicate_gpu():
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_nccl_rank, args=(port,), nprocs=2, join=True)


def _worker(rank, barrier):
    import time

    import torch

    x = torch.ones(1 << 20, device="cuda")
    print(f"worker {rank}: warmed up ({x.numel()} elements)", flush=True)
    if rank == 2:
        print("worker 2: waiting for the other workers at the barrier", flush=True)
        barrier.wait()  # the others never come: they finished and wait to be joined
    else:
        time.sleep(1)
        print(f"worker {rank}: done", flush=True)


def worker_hang():
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_worker, args=(r, barrier)) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()


def triton_shared_memory():
    # A matmul tile sized for nothing real: 256x256x128 fp32 blocks over four stages need far more
    # shared memory than any GPU has, and Triton refuses the launch.
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def matmul(a, b, c, n, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
        rows = tl.arange(0, BLOCK)
        ks = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for k in range(0, n, BLOCK_K):
            x = tl.load(a + rows[:, None] * n + (k + ks)[None, :])
            y = tl.load(b + (k + ks)[:, None] * n + rows[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rows[:, None] * n + rows[None, :], acc)

    n = 256
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    c = torch.empty(n, n, device="cuda")
    matmul[(1,)](a, b, c, n, BLOCK=256, BLOCK_K=128, num_stages=4)
    torch.cuda.synchronize()


def wrong_output():
    # A reduction kernel that accumulates in fp16 checked against an fp32 reference at the
    # tolerances a kernel test uses: the answer drifts, and torch.testing says by how much.
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def row_sum(x, out, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        acc = tl.zeros((BLOCK,), dtype=tl.float16)
        for start in range(0, n, BLOCK):
            acc += tl.load(x + row * n + start + tl.arange(0, BLOCK)).to(tl.float16)
        tl.store(out + row, tl.sum(acc.to(tl.float32), axis=0))

    rows, n = 64, 1 << 16
    x = torch.rand(rows, n, device="cuda")
    got = torch.empty(rows, device="cuda")
    row_sum[(rows,)](x, got, n, BLOCK=16)
    want = x.sum(dim=1)
    print("kernel row sums:", got[:4].tolist(), flush=True)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    print("row sums match the reference")


def nccl_no_interface():
    # NCCL told to bootstrap over a network interface the host does not have: a one-rank group
    # still needs its bootstrap socket.
    import socket

    import torch.multiprocessing as mp

    os.environ["NCCL_SOCKET_IFNAME"] = "gpucompat-none0"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_nccl_single, args=(port,), nprocs=1, join=True)


def _nccl_single(rank, port):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=1, device_id=torch.device("cuda", 0))
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print("rank", rank, "sum", t.item(), flush=True)
    dist.destroy_process_group()


MODES = {
    "torch-oom": torch_oom,
    "torch-oom-fragmented": torch_oom_fragmented,
    "device-assert": device_assert,
    "triton-illegal": triton_illegal,
    "segfault": segfault,
    "triton-compile-error": triton_compile_error,
    "missing-module": missing_module,
    "nccl-duplicate-gpu": nccl_duplicate_gpu,
    "worker-hang": worker_hang,
    "triton-shared-memory": triton_shared_memory,
    "wrong-output": wrong_output,
    "nccl-no-interface": nccl_no_interface,
}

if __name__ == "__main__":
    MODES[sys.argv[1]]()
