"""Workloads shared by the benchmarks: the same computation written for NumPy and for teachflow.

Each pair must compute the same thing; the benchmarks check that before timing.
"""

from __future__ import annotations

import numpy as np

import teachflow as tfl

N_OPS = 20


def chain_numpy(x, y, w):
    a = np.multiply(x, y)
    b = np.add(a, w)
    c = np.tanh(b)
    d = np.subtract(c, x)
    e = np.multiply(d, 0.5)
    f = np.exp(e)
    g = np.true_divide(f, y)
    h = np.matmul(g, w)
    i = np.maximum(h, 0)
    j = np.add(i, 1.0)
    k = np.log(j)
    s = np.exp(-np.logaddexp(0, -k))  # sigmoid, the same formula teachflow's kernel uses
    m = np.multiply(s, x)
    n = np.negative(m)
    o = np.maximum(n, y)
    p = np.sqrt(o)
    q = np.abs(p)
    r = np.sum(q, axis=1, keepdims=True)
    t = np.subtract(q, r)
    return np.mean(t)


def chain_teachflow(x, y, w):
    a = x * y
    b = a + w
    c = b.tanh()
    d = c - x
    e = d * 0.5
    f = e.exp()
    g = f / y
    h = g @ w
    i = h.relu()
    j = i + 1.0
    k = j.log()
    s = k.sigmoid()
    m = s * x
    n = -m
    o = tfl.maximum(n, y)
    p = o.sqrt()
    q = p.abs()
    r = q.sum(axis=1, keepdims=True)
    t = q - r
    return t.mean()


# --- A small MLP training step: batch 64, 784 -> 128 -> 10, forward and backward -----------------


def mlp_params(rng: np.random.Generator) -> list[np.ndarray]:
    def layer(n_in: int, n_out: int) -> list[np.ndarray]:
        w = rng.normal(0, np.sqrt(2 / n_in), (n_in, n_out)).astype(np.float32)
        return [w, np.zeros(n_out, np.float32)]

    return layer(784, 128) + layer(128, 10)


def mlp_step_numpy(x, onehot, w1, b1, w2, b2):
    """Loss and gradients of a 2-layer ReLU MLP with softmax cross-entropy, by hand."""
    n = x.shape[0]
    z1 = x @ w1 + b1
    h = np.maximum(z1, 0)
    logits = h @ w2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    log_p = shifted - np.log(e.sum(axis=1, keepdims=True))
    loss = -(log_p * onehot).sum() / n
    d_logits = (e / e.sum(axis=1, keepdims=True) - onehot) / n
    dw2 = h.T @ d_logits
    db2 = d_logits.sum(axis=0)
    dh = (d_logits @ w2.T) * (z1 > 0)
    dw1 = x.T @ dh
    db1 = dh.sum(axis=0)
    return loss, (dw1, db1, dw2, db2)


def mlp_loss(w1, b1, w2, b2, x, onehot):
    h = (x @ w1 + b1).relu()
    logits = h @ w2 + b2
    return -(tfl.log_softmax(logits, axis=1) * onehot).sum() / x.shape[0]


mlp_value_and_grad = tfl.value_and_grad(mlp_loss, argnums=(0, 1, 2, 3))


def mlp_step_teachflow(x, onehot, w1, b1, w2, b2):
    return mlp_value_and_grad(w1, b1, w2, b2, x, onehot)
