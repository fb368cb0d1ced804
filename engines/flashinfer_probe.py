"""The FlashInfer probe engine: gpucompat's own small server for testing a FlashInfer build on a GPU.

At launch it imports the installed FlashInfer, JIT-compiles and runs its kernels and checks each
against a PyTorch reference, by kernel set: `core` (sampling by top-k renormalisation, batch decode
over a paged KV cache, single-request prefill), `moe` (DeepSeek-V3 expert routing), `gdn` (gated
delta net chunked prefill) and `triton` (FlashInfer's Triton RMSNorm, SiLU-and-mul, state merge). With --workers N it does so in N processes at once that share one JIT
cache, the way tensor-parallel workers do. Failures are FlashInfer's own exceptions, printed as
they are. Then it serves GET /health and POST /v1/completions: a tiny random-weight "model" whose
next-token distribution goes through FlashInfer's sampling kernel.

usage: flashinfer_probe.py --port PORT [--workers N] [--kernels core,moe,gdn,triton]
                          [--all-reduce [--collective-timeout S]] [--stall-rank R [--stall-at WHERE]]

Worker r runs on visible GPU r mod (GPUs visible), so `--workers 2` on two GPUs is one worker per
GPU, as tensor-parallel ranks are. With --all-reduce the workers, after their checks, join an NCCL
process group and all-reduce twice: a small sum they check, then 256 MiB for the bus bandwidth.

With --stall-rank R (fault injection, for measuring hang detection) worker R waits forever in
silence holding its CUDA context: after its checks (`--stall-at checks`, the default: the launch
never completes, as when one tensor-parallel worker is stuck), or after the first all-reduce instead
of joining the second (`--stall-at collective`: the other ranks wait in a real NCCL collective until
NCCL's watchdog ends them after --collective-timeout seconds).

At start worker 0 checks the placement: the GPUs torch sees, by UUID, must be the ones
CUDA_VISIBLE_DEVICES names, in that order, as `nvidia-smi` lists them.
"""
import argparse
import datetime
import json
import math
import multiprocessing as mp
import os
import queue as queues
import subprocess
import sys
import tempfile
import threading
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


def check_moe_routing(torch, flashinfer):
    """DeepSeek-V3 MoE routing (`fused_topk_deepseek`: sigmoid scores plus bias, top groups, top-k
    experts in them, weights renormalised over the unbiased scores)."""
    from flashinfer.fused_moe import fused_topk_deepseek

    torch.manual_seed(3)
    tokens, experts, n_group, topk_group, topk, scaling = 64, 256, 8, 4, 8, 2.5
    scores = torch.randn(tokens, experts, device="cuda", dtype=torch.float32)
    bias = torch.randn(experts, device="cuda", dtype=torch.float32) * 0.1
    values = torch.empty(tokens, topk, device="cuda", dtype=scores.dtype)
    indices = torch.empty(tokens, topk, device="cuda", dtype=torch.int32)
    fused_topk_deepseek(scores, bias, n_group, topk_group, topk, scaling, values, indices)
    # Reference selection, by the same rules in plain torch.
    sig = torch.sigmoid(scores)
    biased = sig + bias
    group_score = biased.view(tokens, n_group, -1).topk(2, dim=-1).values.sum(-1)
    groups = group_score.topk(topk_group, dim=-1).indices
    keep = torch.zeros(tokens, n_group, dtype=torch.bool, device="cuda").scatter_(1, groups, True)
    keep = keep.repeat_interleave(experts // n_group, dim=1)
    ref_idx = biased.masked_fill(~keep, float("-inf")).topk(topk, dim=-1).indices
    chosen, order = indices.long().sort(-1)
    expected, _ = ref_idx.sort(-1)
    same = (chosen == expected).all(-1).float().mean().item()
    if same < 0.95:  # near-ties may pick a different expert now and then; more is a wrong kernel
        raise AssertionError(
            f"moe_routing: FlashInfer chose other experts than the torch reference for "
            f"{(1 - same) * 100:.0f}% of tokens (output mismatch)")
    # The weights of the experts it chose must be their renormalised, scaled sigmoid scores.
    picked = sig.gather(1, indices.long())
    ref_values = picked / picked.sum(-1, keepdim=True) * scaling
    return (values.float() - ref_values).abs().max().item(), 1e-3


def gdn_reference(torch, q, k, v, alpha, beta, cu_seqlens, scale, state):
    """The gated delta rule one token at a time: S <- alpha S; S += k (beta (v - S^T k))^T;
    o = scale q S. `state` and the returned state are [N, H, V, K], as FlashInfer keeps them."""
    heads_q, heads_v = q.shape[1], v.shape[1]
    q = q.float().repeat_interleave(heads_v // heads_q, dim=1)
    k = k.float().repeat_interleave(heads_v // k.shape[1], dim=1)
    v = v.float()
    bounds = [int(x) for x in cu_seqlens.tolist()]
    out = torch.zeros(v.shape, device=v.device)
    finals = []
    for n in range(len(bounds) - 1):
        s = state[n].float().transpose(-1, -2).clone()  # [H, K, V]
        for t in range(bounds[n], bounds[n + 1]):
            s = alpha[t][:, None, None] * s
            old = torch.einsum("hk,hkv->hv", k[t], s)
            s = s + torch.einsum("hk,hv->hkv", k[t], beta[t][:, None] * (v[t] - old))
            out[t] = scale * torch.einsum("hk,hkv->hv", q[t], s)
        finals.append(s.transpose(-1, -2))
    return out, torch.stack(finals)


def check_gdn_prefill(torch, flashinfer):
    """Gated delta net (linear attention of hybrid models such as Qwen3-Next) chunked prefill over
    two sequences of uneven length, with an initial state, grouped value heads."""
    from flashinfer.gdn_prefill import chunk_gated_delta_rule

    torch.manual_seed(4)
    lengths, dim, heads_qk, heads_v = [64, 100], 128, 2, 4
    total = sum(lengths)
    bf16 = torch.bfloat16
    q = (torch.rand(total, heads_qk, dim, device="cuda") * 0.5 - 0.25).to(bf16)
    k = torch.nn.functional.normalize(
        torch.rand(total, heads_qk, dim, device="cuda") * 0.5 - 0.25, p=2, dim=-1).to(bf16)
    v = (torch.rand(total, heads_v, dim, device="cuda") * 0.5 - 0.25).to(bf16)
    alpha = torch.rand(total, heads_v, device="cuda", dtype=torch.float32)
    beta = torch.rand(total, heads_v, device="cuda", dtype=torch.float32)
    cu_seqlens = torch.tensor([0, lengths[0], total], dtype=torch.int64, device="cuda")
    state = torch.randn(len(lengths), heads_v, dim, dim, device="cuda", dtype=torch.float32) * 0.01
    scale = 1.0 / math.sqrt(dim)
    out, final = chunk_gated_delta_rule(q, k, v, alpha, beta, scale, state, True, cu_seqlens)
    ref_out, ref_final = gdn_reference(torch, q, k, v, alpha, beta, cu_seqlens, scale, state)
    error = max((out.float() - ref_out).abs().max().item(),
                (final.float() - ref_final).abs().max().item())
    return error, 2e-2


def check_triton_norm(torch, flashinfer):
    """FlashInfer's Triton RMSNorm (compiled by Triton for the GPU at hand, not by nvcc)."""
    from flashinfer.triton.norm import rms_norm

    torch.manual_seed(5)
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    rms_norm(x, weight, out, 1e-6)
    xf = x.float()
    ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()
    return (out.float() - ref).abs().max().item(), 1e-1


def check_triton_activation(torch, flashinfer):
    """FlashInfer's Triton SiLU-and-multiply (the MLP gate of most models)."""
    from flashinfer.triton.activation import silu_and_mul

    torch.manual_seed(6)
    x = torch.randn(16, 2 * 2048, device="cuda", dtype=torch.bfloat16)
    ref = torch.nn.functional.silu(x[:, :2048].float()) * x[:, 2048:].float()
    return (silu_and_mul(x).float() - ref).abs().max().item(), 5e-2


def check_triton_merge(torch, flashinfer):
    """FlashInfer's Triton merge of two attention states (cascade attention; Hopper only by its
    own check). States carry base-2 log-sum-exp."""
    from flashinfer.triton.cascade import merge_state

    torch.manual_seed(7)
    va, vb = (torch.randn(32, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    sa, sb = (torch.randn(32, 8, device="cuda", dtype=torch.float32) for _ in range(2))
    v, s = merge_state(va, sa, vb, sb)
    top = torch.maximum(sa, sb)
    wa, wb = torch.exp2(sa - top), torch.exp2(sb - top)
    ref_v = (va.float() * wa[..., None] + vb.float() * wb[..., None]) / (wa + wb)[..., None]
    ref_s = top + torch.log2(wa + wb)
    return max((v.float() - ref_v).abs().max().item(), (s - ref_s).abs().max().item()), 2e-2


CHECKS = {
    "sampling": check_sampling,
    "decode": check_decode,
    "prefill": check_prefill,
    "moe_routing": check_moe_routing,
    "gdn_prefill": check_gdn_prefill,
    "triton_norm": check_triton_norm,
    "triton_activation": check_triton_activation,
    "triton_merge": check_triton_merge,
}

# Kernel sets, the values of a matrix's kernel-set axis: each names the checks it runs, in order.
# `core` is what every model needs; `moe` and `gdn` what MoE and hybrid-GDN models add (GDN
# prefill is Hopper-only in these versions and a long cold compile: 34-66 CUTLASS files); `triton`
# are FlashInfer's Triton kernels, which Triton compiles for the GPU it finds.
KERNEL_SETS = {
    "core": ["sampling", "decode", "prefill"],
    "moe": ["moe_routing"],
    "gdn": ["gdn_prefill"],
    "triton": ["triton_norm", "triton_activation", "triton_merge"],
}


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


def stall_forever(rank, where):
    say(f"worker {rank}: --stall-rank: waiting forever {where} (injected hang, at t={time.time():.3f})")
    threading.Event().wait()


def place(rank):
    """Worker r on visible GPU r mod (GPUs visible): one rank per GPU when there are enough."""
    import torch

    device = rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    return device


def all_reduce(rank, collective, stall):
    """Joins the NCCL process group of all workers and all-reduces twice: a small sum whose
    value is checked, then 256 MiB timed for the bus bandwidth (as nccl-tests reports it)."""
    import torch
    import torch.distributed as dist

    store_dir, world, timeout_s = collective
    if torch.cuda.device_count() < world:
        raise RuntimeError(f"--all-reduce needs one GPU per worker: {world} workers, "
                           f"{torch.cuda.device_count()} GPU(s) visible (NCCL refuses two ranks "
                           f"on one GPU)")
    store = dist.FileStore(os.path.join(store_dir, "store"), world)
    device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", store=store, rank=rank, world_size=world, device_id=device,
                            timeout=datetime.timedelta(seconds=timeout_s))
    value = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(value)
    torch.cuda.synchronize()
    want = world * (world + 1) / 2
    if not bool((value == want).all()):
        raise AssertionError(f"all_reduce: rank {rank} got {value.tolist()}, expected {want} "
                             f"in every element (output mismatch)")
    say(f"worker {rank}: all_reduce #1 ok (sum {want:g} over {world} ranks)")
    if stall:
        stall_forever(rank, "instead of joining all_reduce #2")
    data = torch.ones(64 << 20, device=device)
    say(f"worker {rank}: all_reduce #2 started (256 MiB, timeout {timeout_s:g}s, at t={time.time():.3f})")
    dist.all_reduce(data)  # the first one also waits for the slowest rank: not timed
    torch.cuda.synchronize()
    start = time.time()
    for _ in range(5):
        dist.all_reduce(data)
    torch.cuda.synchronize()
    seconds = (time.time() - start) / 5
    # nccl-tests' bus bandwidth: what each link carries, comparable across rank counts.
    bus = data.numel() * 4 / seconds * 2 * (world - 1) / world / 1e9
    say(f"worker {rank}: all_reduce #2 ok: {seconds * 1e3:.2f} ms per 256 MiB, bus bandwidth "
        f"{bus:.1f} GB/s")
    dist.destroy_process_group()


def worker(rank, kernels, queue, stall, stall_at, collective):
    try:
        if rank == 0:
            check_placement()
        device = place(rank)
        say(f"worker {rank}: cuda:{device}")
        run_checks(kernels)
        if stall and stall_at == "checks":
            stall_forever(rank, "after its checks")
        if collective:
            all_reduce(rank, collective, stall)
        queue.put((os.getpid(), None))
    except BaseException:  # the real exception text is the finding: print it whole
        traceback.print_exc()
        sys.stderr.flush()
        queue.put((os.getpid(), "failed"))


def visible_uuids():
    """The UUIDs of the GPUs CUDA_VISIBLE_DEVICES names, in its order, from `nvidia-smi`
    (whose indices are PCI bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's); None when
    that cannot be known (no variable, no nvidia-smi, entries that are not indices)."""
    names = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if not names:
        return None
    try:
        listing = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as err:
        say(f"placement: not checked (nvidia-smi: {err})")
        return None
    by_index = dict(line.replace(" ", "").split(",", 1) for line in listing.splitlines() if "," in line)
    wanted = [n.strip() for n in names.split(",")]
    if not all(n in by_index or n.startswith("GPU-") for n in wanted):
        say(f"placement: not checked (CUDA_VISIBLE_DEVICES={names!r} is not nvidia-smi indices)")
        return None
    return [(n, by_index.get(n, n)) for n in wanted]


def check_placement():
    """Torch's device i must be the GPU that CUDA_VISIBLE_DEVICES names i-th: the harness's
    placement, checked from inside the cell by worker 0 before its kernel checks (a mismatch
    fails the launch as a kernel's failure does)."""
    import torch

    wanted = visible_uuids()
    seen = [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
    norm = lambda u: u.lower().removeprefix("gpu-")  # noqa: E731
    for i, uuid in enumerate(seen):
        say(f"placement: cuda:{i} is GPU-{norm(uuid)} ({torch.cuda.get_device_name(i)})")
    if wanted is None:
        return
    if [norm(u) for _, u in wanted] != [norm(u) for u in seen]:
        say(f"placement mismatch: CUDA_VISIBLE_DEVICES asks for "
            f"{', '.join(f'{n}=GPU-{norm(u)}' for n, u in wanted)} but torch sees "
            f"{', '.join(f'GPU-{norm(u)}' for u in seen)}")
        raise AssertionError("placement: the GPUs torch sees are not the ones asked for, in that order")
    say(f"placement ok: nvidia-smi GPUs {','.join(n for n, _ in wanted)} are cuda:0..{len(seen) - 1}, by UUID")


def generate(max_tokens):
    """Yields (word, logprob) of a tiny random-weight "model" whose next-token distribution goes
    through FlashInfer's sampling kernel, one token at a time. Probabilities that are not finite
    (a broken kernel) are not sampled from: the token is repeated with a NaN logprob, which the
    harness judges a wrong output (rather than torch's sampler failing on them)."""
    import torch
    import flashinfer

    gen = torch.Generator(device="cuda").manual_seed(1234)
    weights = torch.randn(len(WORDS), len(WORDS), device="cuda", generator=gen)
    token = 0
    for _ in range(max_tokens):
        logits = weights[token].unsqueeze(0) * 3.0
        probs = flashinfer.sampling.top_k_renorm_probs(torch.softmax(logits, dim=-1), 4)
        if not bool(torch.isfinite(probs).all()):
            yield WORDS[token], float("nan")
            continue
        token = int(torch.multinomial(probs, 1, generator=gen).item())
        yield WORDS[token], math.log(max(float(probs[0, token]), 1e-30))


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
            if self.path != "/v1/completions":
                return self.reply(404, {"error": {"message": f"no route {self.path}"}})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                max_tokens = int(body.get("max_tokens") or 8)
            except (ValueError, TypeError, AttributeError) as err:
                return self.reply(400, {"error": {"message": f"bad request: {err}"}})
            if body.get("stream"):
                return self.stream(max_tokens)
            try:
                start = time.time()
                tokens = list(generate(max_tokens))
            except Exception as err:  # noqa: BLE001: the error goes back to the client, as engines do
                traceback.print_exc()
                return self.reply(500, {"error": {"message": str(err)}})
            say(f"completion: {len(tokens)} tokens in {time.time() - start:.3f}s")
            words = [word for word, _ in tokens]
            # Python's json writes a NaN logprob as a bare `NaN`, as engines' servers do.
            logprobs = {"tokens": words, "token_logprobs": [lp for _, lp in tokens]}
            self.reply(200, {"object": "text_completion",
                             "choices": [{"index": 0, "text": " ".join(words), "logprobs": logprobs}],
                             "usage": {"completion_tokens": len(tokens)}})

        def stream(self, max_tokens):
            """Server-sent events, one per token, as OpenAI-style servers stream completions. Once
            the 200 is sent, an error travels as an error event; a client that went away ends it."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

            def event(payload):
                self.wfile.write(b"data: " + payload + b"\n\n")
                self.wfile.flush()

            start, count = time.time(), 0
            try:
                try:
                    for word, logprob in generate(max_tokens):
                        text = word if count == 0 else " " + word
                        logprobs = {"tokens": [text], "token_logprobs": [logprob]}
                        event(json.dumps({"object": "text_completion", "choices": [
                            {"index": 0, "text": text, "logprobs": logprobs}]}).encode())
                        count += 1
                except (BrokenPipeError, ConnectionResetError):
                    raise
                except Exception as err:  # noqa: BLE001: mid-stream errors go to the client
                    traceback.print_exc()
                    event(json.dumps({"error": {"message": str(err)}}).encode())
                # Said before the stream ends: a client that has its whole answer may stop this
                # server at once, and the log should still say what was served.
                say(f"completion: {count} tokens streamed in {time.time() - start:.3f}s")
                event(json.dumps({"object": "text_completion", "choices": [],
                                  "usage": {"completion_tokens": count}}).encode())
                event(b"[DONE]")
            except (BrokenPipeError, ConnectionResetError):
                say(f"completion: client went away after {count} tokens")
                return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    say(f"serving on 127.0.0.1:{port}")
    server.serve_forever()


def expand_kernels(text):
    """`core,moe` -> the kernel checks, in order, each once; sets expand to their members."""
    names = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        for name in KERNEL_SETS.get(part, [part]):
            if name not in names:
                names.append(name)
    return names


def wait_for_workers(procs, queue):
    """Each worker's report. A worker that dies without one (a crash, a kill) counts as failed
    instead of leaving the launch waiting forever; after the first failure the others are stopped,
    as an engine's launcher does, so one failed and one stuck worker cannot hang the launch."""
    reported, failed = set(), 0

    def take(pid, error):
        nonlocal failed
        if pid in reported:
            return
        reported.add(pid)
        if error:
            failed += 1
            say(f"worker {pid} failed")

    def drain():
        try:
            while True:
                take(*queue.get_nowait())
        except queues.Empty:
            pass

    while len(reported) < len(procs) and not failed:
        try:
            take(*queue.get(timeout=1.0))
            continue
        except queues.Empty:
            pass
        # A worker puts its report before it exits: drain what arrived, then look for the dead.
        drain()
        for proc in procs:
            if proc.pid not in reported and proc.exitcode is not None:
                reported.add(proc.pid)
                failed += 1
                say(f"worker {proc.pid} exited with code {proc.exitcode} before reporting")
    if failed:
        for proc in procs:
            if proc.pid not in reported and proc.is_alive():
                say(f"stopping worker {proc.pid}")
                proc.terminate()
        # Count the reports that were already on their way (drained before joining, as
        # multiprocessing requires of processes that used a queue).
        while True:
            try:
                take(*queue.get(timeout=0.1))
            except queues.Empty:
                if not any(proc.is_alive() for proc in procs):
                    break
        drain()
    return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--kernels", default="core",
                        help=f"kernels or sets, comma-separated; sets: "
                             f"{', '.join(f'{k}={chr(43).join(v)}' for k, v in KERNEL_SETS.items())}")
    parser.add_argument("--stall-rank", type=int, default=None, metavar="RANK",
                        help="fault injection for measuring hang detection: this worker, after its "
                             "checks, keeps its CUDA context and waits forever in silence, as a "
                             "tensor-parallel worker stuck in a collective does")
    parser.add_argument("--stall-at", choices=["checks", "collective"], default="checks",
                        help="where --stall-rank's worker stops: after its kernel checks, or after "
                             "the first all-reduce instead of joining the second (needs --all-reduce)")
    parser.add_argument("--all-reduce", action="store_true",
                        help="after the checks, all-reduce across the workers over NCCL (one GPU "
                             "per worker), as tensor-parallel ranks do at start")
    parser.add_argument("--collective-timeout", type=float, default=60.0, metavar="S",
                        help="the NCCL process group's timeout: a collective that does not finish "
                             "in S seconds is ended by NCCL's watchdog (default 60)")
    args = parser.parse_args()
    kernels = expand_kernels(args.kernels)
    unknown = [k for k in kernels if k not in CHECKS]
    if unknown or not kernels:
        parser.error(f"unknown kernels {unknown}; known: {sorted(CHECKS)} and sets {sorted(KERNEL_SETS)}")
    if args.workers < 1 or (args.stall_rank is not None and not 0 <= args.stall_rank < args.workers):
        parser.error("--workers must be at least 1 and --stall-rank one of the workers")
    if args.stall_at == "collective" and not args.all_reduce:
        parser.error("--stall-at collective needs --all-reduce")
    start = time.time()
    collective = None
    if args.all_reduce:
        collective = (tempfile.mkdtemp(prefix="probe-pg-"), args.workers, args.collective_timeout)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(rank, kernels, queue, args.stall_rank == rank,
                                              args.stall_at, collective))
             for rank in range(args.workers)]
    for proc in procs:
        proc.start()
    failed = wait_for_workers(procs, queue)
    for proc in procs:
        proc.join()
    if failed:
        say(f"{failed} of {args.workers} workers failed their kernel checks")
        sys.exit(1)
    print(f"GPUCOMPAT_METRIC jit_s={time.time() - start:.2f}", flush=True)
    say(f"all {args.workers} worker(s) passed {','.join(kernels)} in {time.time() - start:.1f}s")
    # Load the "model" before saying ready, as engines do: the server's CUDA context and its
    # sampling kernel (compiled here when the cache is cold), so the first answer measures
    # serving, not start-up, and a kernel that cannot run fails the launch.
    loaded = time.time()
    try:
        list(generate(1))
    except Exception:  # noqa: BLE001: the real exception text is the finding
        traceback.print_exc()
        say("the model could not be loaded")
        sys.exit(1)
    say(f"model loaded in {time.time() - loaded:.1f}s")
    serve(args.port)


if __name__ == "__main__":
    main()
