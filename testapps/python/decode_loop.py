"""decode_loop: token generation as a server runs it eagerly at batch 1 — a small
decoder (4 layers, d_model 512) producing one token at a time, each token ~20 tiny
kernels per layer (RMSNorm, GEMVs, attention over a growing KV cache, GELU MLP,
residuals). The throughput bench of issue 18 (bench/overhead.py --app decode): kerncap
armed must cost the app under 3 % of its tokens per second. Prints
  decode_loop: 2000 tokens in 1.234 s (1621 tokens/s)
and, when KC_TESTAPP_REPORT is set, writes {"tokens", "loop_ns", "checksum"} there.
"""

import argparse
import time

import torch

from kc_testapp import cpu_speed_ns, mark_done, write_report


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=512)
    args = parser.parse_args()
    d, heads = args.d_model, 8
    hd = d // heads
    g = torch.Generator(device="cuda").manual_seed(0)

    def weight(*shape):
        return torch.randn(*shape, device="cuda", generator=g) * (shape[0] ** -0.5)

    layers = [dict(n1=torch.ones(d, device="cuda"), qkv=weight(d, 3 * d), o=weight(d, d),
                   n2=torch.ones(d, device="cuda"), up=weight(d, 4 * d), down=weight(4 * d, d))
              for _ in range(args.layers)]
    embed = weight(1024, d)
    cache_k = [torch.zeros(heads, args.tokens, hd, device="cuda") for _ in layers]
    cache_v = [torch.zeros(heads, args.tokens, hd, device="cuda") for _ in layers]
    token = torch.zeros(1, dtype=torch.long, device="cuda")
    checksum = torch.zeros((), device="cuda")
    torch.cuda.synchronize()
    cal_before = cpu_speed_ns()
    t0 = time.perf_counter()
    with torch.no_grad():
        for t in range(args.tokens):
            x = embed[token]  # (1, d)
            for i, p in enumerate(layers):
                q, k, v = (rms_norm(x, p["n1"]) @ p["qkv"]).view(3, heads, hd)
                cache_k[i][:, t] = k
                cache_v[i][:, t] = v
                att = torch.softmax((cache_k[i][:, : t + 1] @ q.unsqueeze(-1)).squeeze(-1) * hd ** -0.5, dim=-1)
                ctx = (att.unsqueeze(1) @ cache_v[i][:, : t + 1]).reshape(1, d)
                x = x + ctx @ p["o"]
                x = x + torch.nn.functional.gelu(rms_norm(x, p["n2"]) @ p["up"]) @ p["down"]
            token = (x @ embed.T).argmax(-1)  # greedy: the next token depends on this one
            checksum += x.sum()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    cal_after = cpu_speed_ns()
    print(f"decode_loop: {args.tokens} tokens in {seconds:.3f} s ({args.tokens / seconds:.0f} tokens/s)", flush=True)
    write_report(tokens=args.tokens, loop_ns=int(seconds * 1e9), checksum=float(checksum.item()),
                 cal_before_ns=cal_before, cal_after_ns=cal_after)
    mark_done()


if __name__ == "__main__":
    main()
