"""Two of three torch.distributed ranks (gloo, CPU) start and wait, forever, for the third at the
rendezvous: every rank's stack is in torch.distributed. The launcher waits for its ranks."""
import os
import socket
import subprocess
import sys


def rank(r, port):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=3)
    dist.barrier()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch():
    port = free_port()
    ranks = [subprocess.Popen([sys.executable, __file__, str(r), str(port)]) for r in range(2)]
    print(f"2 of 3 ranks started (port {port}); rank 2 never comes", flush=True)
    sys.exit(max(p.wait() for p in ranks))


if len(sys.argv) == 3:
    rank(int(sys.argv[1]), int(sys.argv[2]))
else:
    launch()
