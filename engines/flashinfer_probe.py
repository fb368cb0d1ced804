"""The FlashInfer probe engine: gpucompat's own small server for testing a FlashInfer build on a GPU.

At launch it imports the installed FlashInfer, JIT-compiles and runs its kernels and checks each
against a PyTorch reference: sampling (top-k renormalisation), batch decode over a paged KV cache,
and single-request prefill. With --workers N it does so in N processes at once that share one JIT
cache, the way tensor-parallel workers do. Failures are FlashInfer's own exceptions, printed as
they are. Then it serves GET /health and POST /v1/completions: a tiny random-weight "model" whose
next-token distribution goes through FlashInfer's sampling kernel.

usage: flashinfer_probe.py --port PORT [--workers N] [--kernels sampling,decode,prefill]
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ["Paris", "is", "the", "capital", "of", "France", "and", "a", "city", "on", "Seine",
         "with", "many", "old", "bridges", "."]


def say(message):
    print(f"[probe pid={os.getpid()}] {message}", flush=True)


def check_sampling(torch, flashinfer):
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(4, 32000, device="cuda"), dim=-1)
    k = 50
    out = flashinfer.sampling.top_k_renorm_probs(probs, k)
    top = torch.topk(probs, k, dim=-1)
    ref = torch.zeros_like(probs).scatter_(-1, top.indices, top.values)
    ref = ref / ref.sum(dim=-1, keepdim=True)
    return (out - ref).abs().max().item(), 1e-3


def check_decode(torch, flashinfer):
    torch.manual_seed(1)
    batch, heads_q, heads_kv, dim, page, pages_each = 4, 32, 8, 128, 16, 8
    pages = batch * pages_each
    half = torch.float16
    cache = torch.randn(pages, 2, page, heads_kv, dim, dtype=half, device="cuda")
    indptr = torch.arange(batch + 1, dtype=torch.int32, device="cuda") * pages_each
    indices = torch.arange(pages, dtype=torch.int32, device="cuda")
    last_len = torch.full((batch,), page, dtype=torch.int32, device="cuda")
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    wrapper.plan(indptr, indices, last_len, heads_q, heads_kv, dim, page,
                 q_data_type=half, kv_data_type=half)
    q = torch.randn(batch, heads_q, dim, dtype=half, device="cuda")
    out = wrapper.run(q, cache)
    group = heads_q // heads_kv
    worst = 0.0
    for b in range(batch):
        kv = cache[b * pages_each:(b + 1) * pages_each]
        k = kv[:, 0].reshape(-1, heads_kv, dim).repeat_interleave(group, dim=1).float()
        v = kv[:, 1].reshape(-1, heads_kv, dim).repeat_interleave(group, dim=1).float()
        scores = torch.einsum("hd,nhd->hn", q[b].float(), k) / math.sqrt(dim)
        ref = torch.einsum("hn,nhd->hd", torch.softmax(scores, dim=-1), v)
        worst = max(worst, (out[b].float() - ref).abs().max().item())
    return worst, 2e-2


def check_prefill(torch, flashinfer):
    torch.manual_seed(2)
    length, heads_q, heads_kv, dim = 512, 32, 8, 128
    half = torch.float16
    q = torch.randn(length, heads_q, dim, dtype=half, device="cuda")
    k = torch.randn(length, heads_kv, dim, dtype=half, device="cuda")
    v = torch.randn(length, heads_kv, dim, dtype=half, device="cuda")
    out = flashinfer.single_prefill_with_kv_cache(q, k, v, causal=True)
    group = heads_q // heads_kv
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1).float(),
        k.repeat_interleave(group, dim=1).transpose(0, 1).float(),
        v.repeat_interleave(group, dim=1).transpose(0, 1).float(),
        is_causal=True,
    ).transpose(0, 1)
    return (out.float() - ref).abs().max().item(), 2e-2


CHECKS = {"sampling": check_sampling, "decode": check_decode, "prefill": check_prefill}


def run_checks(kernels):
    """Compiles and checks each kernel; raises FlashInfer's own exception on failure."""
    import torch
    import flashinfer

    say(f"flashinfer {flashinfer.__version__}, torch {torch.__version__}, "
        f"GPU {torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))}), "
        f"TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '')!r}")
    for name in kernels:
        start = time.time()
        error, tolerance = CHECKS[name](torch, flashinfer)
        torch.cuda.synchronize()
        seconds = time.time() - start
        if not error <= tolerance:
            raise AssertionError(
                f"{name}: FlashInfer output differs from the torch reference: max abs error "
                f"{error:.3g} > {tolerance:g} (output mismatch)")
        say(f"{name}: ok in {seconds:.1f}s (max abs error {error:.2e})")


def worker(kernels, queue):
    try:
        run_checks(kernels)
        queue.put((os.getpid(), None))
    except BaseException:  # the real exception text is the finding: print it whole
        traceback.print_exc()
        sys.stderr.flush()
        queue.put((os.getpid(), "failed"))


def generate(max_tokens):
    import torch
    import flashinfer

    gen = torch.Generator(device="cuda").manual_seed(1234)
    weights = torch.randn(len(WORDS), len(WORDS), device="cuda", generator=gen)
    token, words = 0, []
    for _ in range(max_tokens):
        logits = weights[token].unsqueeze(0) * 3.0
        probs = flashinfer.sampling.top_k_renorm_probs(torch.softmax(logits, dim=-1), 4)
        token = int(torch.multinomial(probs, 1, generator=gen).item())
        words.append(WORDS[token])
    return " ".join(words)


def serve(port):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.reply(200 if self.path == "/health" else 404, {})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path != "/v1/completions":
                return self.reply(404, {"error": {"message": f"no route {self.path}"}})
            try:
                start = time.time()
                text = generate(int(body.get("max_tokens", 8)))
                say(f"completion: {len(text.split())} tokens in {time.time() - start:.3f}s")
                self.reply(200, {"object": "text_completion", "choices": [{"index": 0, "text": text}],
                                 "usage": {"completion_tokens": len(text.split())}})
            except Exception as err:  # noqa: BLE001: the error goes back to the client, as engines do
                traceback.print_exc()
                self.reply(500, {"error": {"message": str(err)}})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    say(f"serving on 127.0.0.1:{port}")
    server.serve_forever()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--kernels", default="sampling,decode,prefill")
    args = parser.parse_args()
    kernels = [k for k in args.kernels.split(",") if k]
    unknown = [k for k in kernels if k not in CHECKS]
    if unknown:
        parser.error(f"unknown kernels {unknown}; known: {sorted(CHECKS)}")
    start = time.time()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(kernels, queue)) for _ in range(args.workers)]
    for proc in procs:
        proc.start()
    failed = 0
    for _ in procs:
        pid, error = queue.get()
        if error:
            failed += 1
            say(f"worker {pid} failed")
    for proc in procs:
        proc.join()
    if failed:
        say(f"{failed} of {args.workers} workers failed their kernel checks")
        sys.exit(1)
    print(f"GPUCOMPAT_METRIC jit_s={time.time() - start:.2f}", flush=True)
    say(f"all {args.workers} worker(s) passed {','.join(kernels)} in {time.time() - start:.1f}s")
    serve(args.port)


if __name__ == "__main__":
    main()
