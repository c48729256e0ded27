#!/usr/bin/env python3
# How much looser the pipelined kernel's Cauchy–Schwarz η (certificates.md) is than the per-lane
# form it replaced, on random Gaussian q and k (d = 128, S = 2048, 5 draws): plain Python, no GPU.
#   python3 scripts/eta_cs_ratio.py
import math, random
random.seed(1)
d, S, L = 128, 2048, 16
ef = 1.02 * (d + 4) * 2.0**-24
rl, moves = [], []
for trial in range(5):
    q = [random.gauss(0, 1) for _ in range(d)]
    kmax = [0.0] * L; amax = [0.0] * L
    for t in range(S):
        k = [random.gauss(0, 1) for _ in range(d)]
        for l in range(L):
            a = sum(abs(q[c] * k[c]) for c in range(8 * l, 8 * l + 8))
            n = math.sqrt(sum(k[c] ** 2 for c in range(8 * l, 8 * l + 8)))
            amax[l] = max(amax[l], a); kmax[l] = max(kmax[l], n)
    old = sum(amax)
    cs = sum(math.sqrt(sum(q[c] ** 2 for c in range(8 * l, 8 * l + 8))) * kmax[l] for l in range(L))
    rl.append(cs / old)
    moves.append(math.exp(2 * ef * (cs - old) / math.sqrt(d)) - 1)
print("CS / old per-lane form: %s" % [round(x, 2) for x in rl])
print("e^{2 eta} moves by: %s" % ["%.1e" % m for m in moves])
