"""a2amm.MoE (issue 30, first part): the MoE op from Python under a2amm.launch, against an fp64 numpy model of
the contract's rules (docs/op-contract.md, "The MoE op") within its bound, on numpy and torch inputs, int32
and int64 expert ids, float weights quantized inside and MX pairs (the same bits), ranks with no tokens; bad
arguments refused on their rank naming token and slot, the others told (PeerError)."""
import ctypes
import os
import signal
import time

import numpy as np
import pytest

import a2amm
import mx_model
from conftest import needs_torch, shared_floats, shared_text

H, I, MAX_T = 64, 32, 12


def expert_weights(E, seed=5):
    """Every expert's float weights: w13 [E, 2I, H] and w2 [E, H, I], deterministic."""
    rng = np.random.default_rng(seed)
    w13 = (rng.standard_normal((E, 2 * I, H)) / 8).astype(np.float32)
    w2 = (rng.standard_normal((E, H, I)) / 8).astype(np.float32)
    return w13, w2


def rank_tokens(r, R, E, k, call, empty_rank=None):
    """Rank r's call: x [T, H] float32, ids [T, k] int64 (distinct, some -1), weights [T, k] float32."""
    rng = np.random.default_rng(1000 * call + r)
    T = 0 if r == empty_rank else int(rng.integers(0, MAX_T + 1))
    x = rng.standard_normal((T, H)).astype(np.float32)
    ids = np.stack([rng.permutation(E)[:k] for _ in range(T)]).astype(np.int64) if T else np.zeros((0, k), np.int64)
    if T:
        ids[rng.random((T, k)) < 0.1] = -1
    w = rng.random((T, k)).astype(np.float32)
    return x, ids, w


def mx(v, fmt="e4m3", mode="rceil"):
    codes, scales = a2amm.quantize(np.ascontiguousarray(v.reshape(-1, v.shape[-1])), fmt, mode)
    return codes.reshape(v.shape), scales.reshape(v.shape[:-1] + (v.shape[-1] // 32,))


ETA8, ETA24 = 2.0 ** -133, 2.0 ** -149  # a bf16 and an fp32 rounding below the smallest normal (absolute)


def reference(x, ids, w, w13, w2):
    """fp64 of the formulas from the MX values (what the op quantized), and the sums of the contract's bound:
    its two relative terms' and its absolute term A (docs/op-contract.md, "The MoE op")."""
    xc, xs = mx(x)
    xd = mx_model.dequantize(xc.reshape(-1, H), xs.reshape(-1, H // 32)).reshape(x.shape)
    c13, s13 = mx(w13)
    c2, s2 = mx(w2)
    d13 = mx_model.dequantize(c13.reshape(-1, H), s13.reshape(-1, H // 32)).reshape(w13.shape)
    d2 = mx_model.dequantize(c2.reshape(-1, I), s2.reshape(-1, I // 32)).reshape(w2.shape)
    T, k = ids.shape
    ref, tol1, tol2, tol3 = np.zeros((T, H)), np.zeros((T, H)), np.zeros((T, H)), np.full((T, H), ETA8)
    for t in range(T):
        for j in range(k):
            e = ids[t, j]
            if e < 0:
                continue
            g, u = d13[e, :I] @ xd[t], d13[e, I:] @ xd[t]
            sg, su = np.abs(d13[e, :I]) @ np.abs(xd[t]), np.abs(d13[e, I:]) @ np.abs(xd[t])
            silu = g / (1 + np.exp(-g))
            a = silu * u
            q = 1.1 * np.abs(u) * sg + np.abs(silu) * su
            ref[t] += float(w[t, j]) * (d2[e] @ a)
            tol1[t] += abs(float(w[t, j])) * (np.abs(d2[e]) @ np.abs(a))
            tol2[t] += abs(float(w[t, j])) * (np.abs(d2[e]) @ q)
            z = np.abs(d2[e]) @ (ETA8 + (H + 1) * ETA24 * (1 + 1.1 * np.abs(u) + np.abs(silu)))
            tol3[t] += ETA8 + ETA24 + abs(float(w[t, j])) * (I * ETA24 + z)
    return ref, tol1, tol2, tol3


def check(got_bits, x, ids, w, w13, w2, R, what):
    got = a2amm.bf16_to_float32(np.asarray(got_bits).view(np.uint16)).astype(np.float64)
    ref, tol1, tol2, tol3 = reference(x, ids, w, w13, w2)
    u8, u24 = 2.0 ** -8, 2.0 ** -24
    bound = u8 * np.abs(ref) + (2 * u8 + (I + ids.shape[1] + R + 8) * u24) * tol1 + H * u24 * tol2 + tol3
    bad = np.abs(got - ref) > bound
    assert not bad.any(), "%s: %d of %d off the fp64 bound, first at %s: %r vs %r" % (
        what, bad.sum(), bad.size, np.argwhere(bad)[0], got[bad][0], ref[bad][0])


@pytest.mark.parametrize("R,E,k", [(1, 2, 1), (2, 4, 2), (2, 8, 8), (4, 8, 3), (1, 8, 4), (2, 8, 5), (4, 8, 6),
                                   (2, 8, 7)])
def test_moe_against_fp64(R, E, k):
    w13, w2 = expert_weights(E)
    calls = 2

    def rank(comm):
        r, L = comm.rank, E // R
        outs = []
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            assert moe.local_experts == L
            moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
            for call in range(calls):
                x, ids, w = rank_tokens(r, R, E, k, call, empty_rank=1 if R > 1 else None)
                outs.append(moe(x, ids if call else ids.astype(np.int32), w))
        return outs

    results = a2amm.launch(R, rank)
    for r in range(R):
        for call in range(calls):
            x, ids, w = rank_tokens(r, R, E, k, call, empty_rank=1 if R > 1 else None)
            assert results[r][call].shape == (x.shape[0], H) and results[r][call].dtype == np.uint16
            check(results[r][call], x, ids, w, w13, w2, R, "R=%d rank %d call %d" % (R, r, call))


def routed_tokens(r, E, k, route):
    """Rank r's tokens with a routing of a kind: "uniform" (distinct random experts), "skewed" (every token's
    first slot on expert 0), "hot" (every token on experts 0 .. k-1: all on the first rank), "none" (every
    slot -1: no token goes anywhere) and "mixed" (each token one of those)."""
    rng = np.random.default_rng(77 + r)
    T = MAX_T
    x = rng.standard_normal((T, H)).astype(np.float32)
    ids = np.stack([rng.permutation(E)[:k] for _ in range(T)]).astype(np.int64)
    for t in range(T):
        kind = ["uniform", "skewed", "hot", "none"][t % 4] if route == "mixed" else route
        if kind == "skewed" and 0 not in ids[t, :1]:
            ids[t, ids[t] == 0] = ids[t, 0]
            ids[t, 0] = 0
        elif kind == "hot":
            ids[t] = np.arange(k)
        elif kind == "none":
            ids[t] = -1
    w = rng.random((T, k)).astype(np.float32)
    return x, ids, w


@pytest.mark.parametrize("route", ["uniform", "skewed", "hot", "none", "mixed"])
@pytest.mark.parametrize("R", [1, 2, 4])
def test_every_route_against_fp64(route, R):
    E, k = 8, 3
    w13, w2 = expert_weights(E)

    def rank(comm):
        r, L = comm.rank, E // R
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
            return moe(*routed_tokens(r, E, k, route))

    results = a2amm.launch(R, rank)
    for r in range(R):
        x, ids, w = routed_tokens(r, E, k, route)
        assert len(set(map(tuple, ids.tolist()))) >= 1 and all(len(set(i) - {-1}) == (i >= 0).sum() for i in ids)
        check(results[r], x, ids, w, w13, w2, R, "%s routing, R=%d rank %d" % (route, R, r))
        if route == "none":
            assert not results[r].any(), "tokens with no expert get zeros"


def test_mx_pairs_and_float_give_the_same_bits():
    R, E, k = 2, 4, 2
    w13, w2 = expert_weights(E)

    def rank(comm):
        r, L = comm.rank, E // R
        x, ids, w = rank_tokens(r, R, E, k, 0)
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
            from_float = moe(x, ids, w)
            moe.set_weights(mx(w13[r * L:(r + 1) * L]), mx(w2[r * L:(r + 1) * L]))
            from_pairs = moe(mx(x), ids, w)
        return from_float, from_pairs

    for from_float, from_pairs in a2amm.launch(R, rank):
        np.testing.assert_array_equal(from_float, from_pairs)


@pytest.mark.parametrize("mode", ["rceil", "floor"])
def test_values_are_quantized_in_the_call_with_the_ops_mode(mode):
    """float32 and bf16 x go to the C call as values and are quantized there with the op's mode: the bits of
    the same call on the MX pair a2amm.quantize makes with that mode; dispatch's rows too."""
    R, E, k = 2, 4, 2
    w13, w2 = expert_weights(E)

    def rank(comm):
        r, L = comm.rank, E // R
        x, ids, w = rank_tokens(r, R, E, k, 0)
        ids = ids.astype(np.int32)
        bf16 = a2amm.float32_to_bf16(x)
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T, mode=mode) as moe:
            moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
            same = [np.array_equal(moe(x, ids, w), moe(a2amm.quantize(x, "e4m3", mode), ids, w)),
                    np.array_equal(moe(bf16, ids, w), moe(a2amm.quantize(bf16, "e4m3", mode), ids, w))]
            rows, handle = moe.dispatch(x, ids, w)
            rows_q, handle_q = moe.dispatch(a2amm.quantize(x, "e4m3", mode), ids, w)
            same.append(all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(rows, rows_q)))
            moe.combine(handle, [None if c.shape[0] == 0 else np.zeros((c.shape[0], H), np.float32) for c, _ in rows])
            moe.combine(handle_q, [None if c.shape[0] == 0 else np.zeros((c.shape[0], H), np.float32)
                                   for c, _ in rows_q])
        return same

    for same in a2amm.launch(R, rank):
        assert same == [True, True, True]


def calls_with_one_bad_rank(bad_rank, spoil):
    """Two ranks call the MoE on 5 tokens (experts 0 and 1, weights 0.5); on bad_rank, spoil(x, ids, w) returns
    what that rank passes instead. What each rank's call raised, as "TypeName|message", by rank."""
    R, E, k = 2, 4, 2
    said = shared_text(R)

    def rank(comm):
        try:
            with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
                moe.set_weights(*(v[comm.rank * 2:comm.rank * 2 + 2] for v in expert_weights(E)))
                args = (np.ones((5, H), np.float32), np.array([[0, 1]] * 5, np.int64), np.full((5, k), 0.5, np.float32))
                moe(*(spoil(*args) if comm.rank == bad_rank else args))
        except BaseException as e:
            said.put(comm.rank, "%s|%s" % (type(e).__name__, e))
            raise

    with pytest.raises(a2amm.Error):
        a2amm.launch(R, rank)
    return [said.get(r) for r in range(R)]


@pytest.mark.parametrize("bad,error", [(lambda x: x.astype(np.float64), "TypeError|x must be float32"),
                                       (lambda x: x[:, :32].copy(), "ValueError|x must have shape")],
                         ids=["float64", "width"])
def test_a_bad_x_is_refused_on_its_rank_and_the_others_told(bad, error):
    """x values of the wrong type or width: refused by the call on that rank, naming x; the other rank's
    call ends with PeerError naming it."""
    said = calls_with_one_bad_rank(1, lambda x, ids, w: (bad(x), ids, w))
    assert said[1].startswith(error), said[1]
    assert said[0].startswith("PeerError|") and "rank 1" in said[0], said[0]


@needs_torch
def test_moe_on_torch_tensors():
    import torch
    R, E, k = 2, 4, 2
    w13, w2 = expert_weights(E)

    def rank(comm):
        r, L = comm.rank, E // R
        x, ids, w = rank_tokens(r, R, E, k, 0)
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            moe.set_weights(torch.from_numpy(w13[r * L:(r + 1) * L]), torch.from_numpy(w2[r * L:(r + 1) * L]))
            out = moe(torch.from_numpy(x), torch.from_numpy(ids), torch.from_numpy(w))
            assert out.dtype == torch.bfloat16 and tuple(out.shape) == (x.shape[0], H)
            bits = out.view(torch.int16).numpy().view(np.uint16).copy()
            np.testing.assert_array_equal(bits, moe(x, ids, w))  # numpy inputs: the same bits
        return bits

    results = a2amm.launch(R, rank)
    for r in range(R):
        x, ids, w = rank_tokens(r, R, E, k, 0)
        check(results[r], x, ids, w, w13, w2, R, "torch, rank %d" % r)


@pytest.mark.parametrize("bad,text", [
    (lambda ids, w: ids.__setitem__((3, 1), 4), "token 3, slot 1: expert 4 is out of range"),
    (lambda ids, w: ids.__setitem__((3, 1), 2 ** 40), "token 3, slot 1: expert 1099511627776 is out of range"),
    (lambda ids, w: ids.__setitem__((3, 1), ids[3, 0]), "token 3, slot 1: expert"),
    (lambda ids, w: w.__setitem__((3, 1), np.inf), "token 3, slot 1: the weight of expert"),
], ids=["range", "int64", "twice", "inf"])
def test_a_bad_routing_is_refused_naming_token_and_slot(bad, text):
    def spoil(x, ids, w):
        bad(ids, w)
        return x, ids, w

    said = calls_with_one_bad_rank(0, spoil)
    assert said[0].startswith("ArgumentError|") and text in said[0], said[0]
    assert said[1].startswith("PeerError|") and "rank 0" in said[1], said[1]


def test_bad_arguments_of_making_one():
    def rank(comm):
        with pytest.raises(a2amm.ArgumentError, match="experts must be a positive multiple of the ranks"):
            a2amm.MoE(comm, experts=3, topk=1, hidden=H, inter=I, max_tokens=4)
        return "refused"

    with pytest.raises(a2amm.Error, match="experts must be a positive multiple"):
        a2amm.launch(2, rank)


# ---- dispatch and combine alone: experts of the caller's own ---------------------------------------------------

def numpy_expert(rows, w13, w2):
    """The SwiGLU expert on dequantized rows [n, H] with MX weights, in fp64, as float32 (the caller's own)."""
    c13, s13 = mx(w13)
    c2, s2 = mx(w2)
    d13 = mx_model.dequantize(c13, s13)
    d2 = mx_model.dequantize(c2, s2)
    g, u = rows.astype(np.float64) @ d13[:I].T, rows.astype(np.float64) @ d13[I:].T
    return ((g / (1 + np.exp(-g)) * u) @ d2.T).astype(np.float32)


@pytest.mark.parametrize("R,E,k", [(1, 2, 2), (2, 8, 3), (4, 8, 2)])
def test_dispatch_and_combine_with_experts_of_ones_own(R, E, k):
    w13, w2 = expert_weights(E)
    empty = 1 if R > 1 else None

    def rank(comm):
        r, L = comm.rank, E // R
        x, ids, w = rank_tokens(r, R, E, k, 0, empty_rank=empty)
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            rows, handle = moe.dispatch(x, ids, w, dequantize="float32")
            ys = [numpy_expert(v, w13[r * L + le], w2[r * L + le]) if len(v) else None for le, v in enumerate(rows)]
            return moe.combine(handle, ys), [len(v) for v in rows]

    results = a2amm.launch(R, rank)
    every = [rank_tokens(r, R, E, k, 0, empty_rank=empty) for r in range(R)]
    for r in range(R):  # each expert got one row per (token, slot) routed to it, from every rank
        L = E // R
        want = [sum(int((ids == r * L + le).sum()) for _, ids, _ in every) for le in range(L)]
        assert results[r][1] == want, (results[r][1], want)
        x, ids, w = every[r]
        check(results[r][0], x, ids, w, w13, w2, R, "dispatch + combine, rank %d" % r)


def test_dispatch_dequantizes_to_bf16_or_float32_on_request():
    """dequantize=True: bf16 rows (numpy uint16 bits; torch.bfloat16 for torch), the MX values exactly;
    "float32": the same values as float32; the pairs otherwise; anything else refused."""
    R, E, k = 2, 4, 2

    def rank(comm):
        r = comm.rank
        x, ids, w = rank_tokens(r, R, E, k, 0)
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            pairs, h0 = moe.dispatch(x, ids, w)
            bf16, h1 = moe.dispatch(x, ids, w, dequantize=True)
            f32, h2 = moe.dispatch(x, ids, w, dequantize="float32")
            for h, rows in ((h0, pairs), (h1, bf16), (h2, f32)):
                moe.combine(h, [None if len(v) == 0 else np.zeros((len(v), H), np.float32)
                                for v in (p[0] if isinstance(p, tuple) else p for p in rows)])
            with pytest.raises(ValueError, match="dequantize must be"):
                moe.dispatch(x, ids, w, dequantize="fp8")
        return [(a2amm.dequantize(c, s), b, f) for (c, s), b, f in zip(pairs, bf16, f32)]

    for rows in a2amm.launch(R, rank):
        assert any(len(f) for _, _, f in rows)
        for exact, b, f in rows:
            assert b.dtype == np.uint16 and f.dtype == np.float32
            np.testing.assert_array_equal(f, exact)
            np.testing.assert_array_equal(a2amm.bf16_to_float32(b), exact)


@pytest.mark.parametrize("R,E,k", [(1, 4, 2), (2, 8, 3), (4, 8, 2)])
def test_dispatch_the_ops_experts_and_combine_give_the_calls_bits(R, E, k):
    """moe.expert (the op's own computation of a local expert) on the rows dispatch gives, then combine: the
    bits of moe(x, ...) on every rank; on torch rows a torch tensor; a bad expert index refused."""
    w13, w2 = expert_weights(E)
    empty = 1 if R > 1 else None

    def rank(comm):
        r, L = comm.rank, E // R
        x, ids, w = rank_tokens(r, R, E, k, 0, empty_rank=empty)
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
            called = moe(x, ids, w)
            rows, handle = moe.dispatch(x, ids, w)
            ys = [moe.expert(le, pair) for le, pair in enumerate(rows)]
            assert all(y.dtype == np.float32 and y.shape == (len(pair[0]), H) for y, pair in zip(ys, rows))
            by_parts = moe.combine(handle, ys)
            with pytest.raises(a2amm.ArgumentError, match="local_expert must be one of the local experts"):
                moe.expert(L, rows[0])
            with pytest.raises(TypeError, match="rows must be an MX pair"):
                moe.expert(0, rows[0][0])
        return np.array_equal(called, by_parts), sum(len(p[0]) for p in rows)

    results = a2amm.launch(R, rank)
    assert all(same for same, _ in results), results
    assert sum(n for _, n in results) > 0, results


@pytest.mark.parametrize("R,E,k", [(1, 4, 2), (2, 8, 3), (4, 8, 2)])
def test_experts_by_a2amm_matmul_between_dispatch_and_combine_give_the_calls_bits(R, E, k):
    """A caller's own experts from the public matmuls (issue 30): g and u by a2amm.matmul(...,
    out_dtype="float32"), a = a2amm.swiglu(g, u), y = a2amm.matmul_bf16a(a, BF16AWeights(W2)); between
    dispatch and combine they give moe(x, ...)'s bits on every rank. The weights are the MX pairs set_weights
    makes of the floats (a2amm.quantize with the op's mode)."""
    w13, w2 = expert_weights(E)
    empty = 1 if R > 1 else None

    def rank(comm):
        r, L = comm.rank, E // R
        x, ids, w = rank_tokens(r, R, E, k, 0, empty_rank=empty)
        c13, s13 = mx(w13[r * L:(r + 1) * L])
        c2, s2 = mx(w2[r * L:(r + 1) * L])
        ups = [a2amm.Weights(c13[le], s13[le]) for le in range(L)]
        downs = [a2amm.BF16AWeights(c2[le], s2[le]) for le in range(L)]
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
            called = moe(x, ids, w)
            rows, handle = moe.dispatch(x, ids, w)
            ys = []
            for le, (codes, scales) in enumerate(rows):
                gu = a2amm.matmul(codes, scales, ups[le], out_dtype="float32")
                assert gu.dtype == np.float32 and gu.shape == (len(codes), 2 * I)
                ys.append(a2amm.matmul_bf16a(a2amm.swiglu(gu[:, :I], gu[:, I:]), downs[le]))
            by_matmul = moe.combine(handle, ys)
        for wt in ups + downs:
            wt.close()
        return np.array_equal(called, by_matmul), sum(len(p[0]) for p in rows)

    results = a2amm.launch(R, rank)
    assert all(same for same, _ in results), results
    assert sum(n for _, n in results) > 0, results


def test_the_public_expert_pieces_refuse_what_they_cannot_take():
    """matmul's out_dtype, swiglu's shapes, BF16AWeights' shape and matmul_bf16a's a and weights."""
    c, s = mx(np.ones((64, 96), np.float32))
    w = a2amm.Weights(c, s)
    with pytest.raises(ValueError, match="out_dtype must be"):
        a2amm.matmul(c[:2], s[:2], w, out_dtype="float16")
    with pytest.raises(ValueError, match="g's shape"):
        a2amm.swiglu(np.ones((2, 4), np.float32), np.ones((2, 5), np.float32))
    with pytest.raises(TypeError):
        a2amm.swiglu(np.ones((2, 4), np.float64), np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="multiples of 32"):
        a2amm.BF16AWeights(c[:48], s[:48])
    d = a2amm.BF16AWeights(c, s)
    with pytest.raises(ValueError, match="k = 96"):
        a2amm.matmul_bf16a(np.zeros((2, 64), np.uint16), d)
    with pytest.raises(TypeError, match="must be an a2amm.BF16AWeights"):
        a2amm.matmul_bf16a(np.zeros((2, 96), np.uint16), w)
    y = a2amm.matmul_bf16a(a2amm.float32_to_bf16(np.ones((2, 96), np.float32)), d)
    np.testing.assert_allclose(y, np.ones((2, 64)) * 96, rtol=1e-6)  # a row of ones by weights of ones
    d.close()
    with pytest.raises(ValueError, match="closed"):
        a2amm.matmul_bf16a(np.zeros((2, 96), np.uint16), d)
    w.close()


def test_a_batch_is_combined_once():
    w13, w2 = expert_weights(2)

    def rank(comm):
        with a2amm.MoE(comm, experts=2, topk=1, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            x, ids, w = rank_tokens(0, 1, 2, 1, 0)
            rows, handle = moe.dispatch(x, ids, w, dequantize=True)
            ys = [numpy_expert(a2amm.bf16_to_float32(v), w13[le], w2[le]) if len(v) else None
                  for le, v in enumerate(rows)]
            moe.combine(handle, ys)
            moe.combine(handle, ys)

    with pytest.raises(a2amm.Error, match="the batch is not from this MoE's dispatch, or was combined already"):
        a2amm.launch(1, rank)


@needs_torch
def test_dispatch_and_combine_on_torch():
    import torch
    R, E, k = 2, 4, 2
    w13, w2 = expert_weights(E)

    def rank(comm):
        r, L = comm.rank, E // R
        x, ids, w = rank_tokens(r, R, E, k, 0)
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            rows, handle = moe.dispatch(torch.from_numpy(x), torch.from_numpy(ids), torch.from_numpy(w))
            assert all(isinstance(c, torch.Tensor) and c.dtype == torch.uint8 for c, _ in rows)
            bf16, h = moe.dispatch(torch.from_numpy(x), torch.from_numpy(ids), torch.from_numpy(w), dequantize=True)
            assert all(v.dtype == torch.bfloat16 for v in bf16)
            for v, (c, s) in zip(bf16, rows):
                np.testing.assert_array_equal(v.float().numpy(), a2amm.dequantize(c.numpy(), s.numpy()))
            moe.combine(h, [None if len(v) == 0 else torch.zeros((len(v), H)) for v in bf16])
            ys = [torch.from_numpy(numpy_expert(a2amm.dequantize(c.numpy(), s.numpy()), w13[r * L + le],
                                                w2[r * L + le])).bfloat16() for le, (c, s) in enumerate(rows)]
            out = moe.combine(handle, ys)
            assert out.dtype == torch.bfloat16 and tuple(out.shape) == (x.shape[0], H)
            return out.float().numpy()

    for r, got in enumerate(a2amm.launch(R, rank)):
        x, ids, w = rank_tokens(r, R, E, k, 0)
        ref, tol1, tol2, tol3 = reference(x, ids, w, w13, w2)
        # the contract's bound, and one more bf16 rounding of each expert output (the ys went through bf16)
        bound = (2.0 ** -8 * np.abs(ref) + 3 * 2.0 ** -8 * tol1 + H * 2.0 ** -24 * tol2 + tol3
                 + ETA8 * np.abs(w).sum(axis=1, keepdims=True))
        assert np.all(np.abs(got - ref) <= bound), np.max(np.abs(got - ref) / bound)


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_rank_that_raises_or_dies_stops_the_others_within_seconds(how):
    """Every rank calls the MoE in a loop; rank 1 raises or is killed after its first call: the others'
    calls end with PeerError naming it within seconds (and nothing is left in /dev/shm: conftest)."""
    R, E, k = 3, 6, 2
    said, when = shared_text(R), shared_floats(R)
    w13, w2 = expert_weights(E)

    def rank(comm):
        r, L = comm.rank, E // R
        x, ids, w = rank_tokens(r, R, E, k, 0)
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
            moe(x, ids, w)
            t0 = time.monotonic()
            if r == 1:
                if how == "raise":
                    raise ValueError("rank 1 gives up")
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                while time.monotonic() - t0 < 30:
                    moe(x, ids, w)
            except BaseException as e:
                when[r] = time.monotonic() - t0
                said.put(r, "%s|%s" % (type(e).__name__, e))
                raise

    t0 = time.monotonic()
    with pytest.raises(a2amm.Error) as info:
        a2amm.launch(R, rank)
    assert time.monotonic() - t0 < 20 and info.value.rank == 1, info.value
    for r in (0, 2):
        kind, text = said.get(r).split("|", 1)
        assert kind == "PeerError" and "rank 1" in text, said.get(r)
        assert when[r] < 5, "rank %d stopped %.1f s later" % (r, when[r])


def test_the_schedules_give_the_same_bits():
    """schedule="overlap" (two chunks of a rank's tokens where max_tokens is over 64, one chunk's exchanges
    while the other's experts run), "unfused" and "fused" (the default: overlap by size) give the same bits;
    a bad schedule is refused."""
    R, E, k, T = 2, 4, 2, 150
    w13, w2 = expert_weights(E)

    def rank(comm):
        r, L = comm.rank, E // R
        rng = np.random.default_rng(77 + r)
        Tr = T - 60 * r
        x = rng.standard_normal((Tr, H)).astype(np.float32)
        ids = np.stack([rng.permutation(E)[:k] for _ in range(Tr)]).astype(np.int32)
        w = rng.random((Tr, k)).astype(np.float32)
        outs = []
        for schedule in ("fused", "unfused", "overlap"):
            with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=T, schedule=schedule) as moe:
                assert moe.schedule == schedule
                moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
                outs.append(moe(x, ids, w))
        return outs

    for fused, unfused, overlap in a2amm.launch(R, rank):
        assert fused.shape[0] > 64 and np.array_equal(fused, unfused) and np.array_equal(fused, overlap)

    def bad(comm):
        with pytest.raises(ValueError, match='schedule must be "fused" or "unfused" or "overlap"; got \'overlapped\''):
            a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=T, schedule="overlapped")

    # the refusal fails the communicator (the other ranks are in the collective call): the launch says why
    with pytest.raises(a2amm.Error, match='MoE: schedule must be "fused" or "unfused" or "overlap"'):
        a2amm.launch(2, bad)


def test_moe_weights_are_prepared_once_for_several_ops():
    """a2amm.MoEWeights: one preparation borrowed by a decode-sized op and a chunked one gives the bits of ops
    with their own weights; it stays alive while an op uses it (close refused), and one prepared for too few
    rows or another shape is refused naming both."""
    R, E, k = 2, 4, 2
    w13, w2 = expert_weights(E)

    def rank(comm):
        r, L = comm.rank, E // R
        mine13, mine2 = w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L]
        x, ids, w = rank_tokens(r, R, E, k, 3)
        ids = ids.astype(np.int32)
        shared = a2amm.MoEWeights(mine13, mine2, max_rows=R * 100)
        out = {}
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=100) as big, \
                a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as small, \
                a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as own:
            big.use_weights(shared)
            small.set_weights(shared, None)
            own.set_weights(mine13, mine2)
            out["same"] = (np.array_equal(big(x, ids, w), own(x, ids, w))
                           and np.array_equal(small(x, ids, w), own(x, ids, w)))
            out["held"] = big.weights is shared and small.weights is shared and own.weights is None
            with pytest.raises(ValueError, match="in use by 2 MoE op"):
                shared.close()
            few = a2amm.MoEWeights(mine13, mine2, max_rows=10)
            with pytest.raises(a2amm.ArgumentError, match="prepared for 10 rows an expert"):
                big.use_weights(few)
            other = a2amm.MoEWeights(np.concatenate([mine13, mine13], axis=1), w2[:L, :, :].repeat(2, axis=2),
                                     max_rows=R * 100)
            with pytest.raises(a2amm.ArgumentError, match="inter 64"):
                big.use_weights(other)
            few.close(), other.close()
        shared.close()
        out["closed"] = shared.closed
        return out

    for out in a2amm.launch(R, rank):
        assert out == {"same": True, "held": True, "closed": True}


# ---- MX pairs are held to their whole shape ----------------------------------------------------------------------

def pair(v):
    """v's MX pair as a2amm.quantize makes it, codes and scales reshaped to v's leading dimensions."""
    return mx(np.ascontiguousarray(v))


def wrong_pairs(L, hid, inter):
    """MX pairs of the sizes set_weights takes but of the wrong shape: (which argument, w13, w2, the text)."""
    w13 = (np.random.default_rng(3).standard_normal((L, 2 * inter, hid)) / 8).astype(np.float32)
    w2 = (np.random.default_rng(4).standard_normal((L, hid, inter)) / 8).astype(np.float32)
    c13, s13 = pair(w13)
    c2, s2 = pair(w2)
    c2t = np.ascontiguousarray(c2.transpose(0, 2, 1))  # [L, inter, hid]: the same size
    c13t = np.ascontiguousarray(c13.transpose(0, 2, 1))  # [L, hid, 2*inter]
    return [
        ("w2 codes", (c13, s13), (c2t, s2),
         "w2 codes must have shape [E/R, hidden, inter] = [%d, %d, %d]; got [%d, %d, %d]"
         % (L, hid, inter, L, inter, hid)),
        ("w13 codes", (c13t, s13.reshape(L * hid // 32, 2 * inter)), (c2, s2),
         "w13 codes must have shape [E/R, 2*inter, hidden] = [%d, %d, %d]; got [%d, %d, %d]"
         % (L, 2 * inter, hid, L, hid, 2 * inter)),
        ("w13 scales", (c13, s13.reshape(L * hid // 32, 2 * inter)), (c2, s2),
         "w13 scales must have shape [E/R, 2*inter, hidden/32] = [%d, %d, %d]; got [%d, %d]"
         % (L, 2 * inter, hid // 32, L * hid // 32, 2 * inter)),
        ("w2 scales", (c13, s13), (c2, s2.reshape(L, inter // 32, hid)),
         "w2 scales must have shape [E/R, hidden, inter/32] = [%d, %d, %d]; got [%d, %d, %d]"
         % (L, hid, inter // 32, L, inter // 32, hid)),
        ("flattened w2", (c13, s13), (c2.reshape(L * hid, inter), s2.reshape(L * hid, inter // 32)),
         "w2 codes must have shape [E/R, hidden, inter] = [%d, %d, %d]; got [%d, %d]"
         % (L, hid, inter, L * hid, inter)),
    ]


@pytest.mark.parametrize("case", range(5), ids=[c[0] for c in wrong_pairs(2, 64, 64)])
def test_mx_pair_weights_of_the_wrong_shape_are_refused_though_their_size_fits(case):
    """MoE.set_weights and MoEWeights take MX pairs of exactly [E/R, rows, cols] and [E/R, rows, cols/32]:
    w2 codes [L, inter, hidden] (transposed, the same size), w13 codes [L, hidden, 2*inter] with scales
    [L*hidden/32, 2*inter], and flattened forms are refused naming the argument, the shape and what came."""
    L, hid, inter = 2, 64, 96  # hidden, 2*inter and inter all differ: a transposed array cannot pass
    name, w13, w2, text = wrong_pairs(L, hid, inter)[case]

    def rank(comm):
        with a2amm.MoE(comm, experts=L, topk=1, hidden=hid, inter=inter, max_tokens=4) as moe:
            with pytest.raises(ValueError) as e:
                moe.set_weights(w13, w2)
            return str(e.value)

    assert a2amm.launch(1, rank) == [text]
    if name != "w13 codes":  # MoEWeights reads hidden and inter from w13's codes
        with pytest.raises(ValueError) as e:
            a2amm.MoEWeights(w13, w2, max_rows=4)
        assert str(e.value) == text
    else:
        with pytest.raises(ValueError, match="w13 scales must have shape|w2 codes must have shape"):
            a2amm.MoEWeights(w13, w2, max_rows=4)


def test_an_x_pair_of_the_wrong_shape_is_refused_on_every_path():
    """x as an MX pair: codes [T, hidden] and scales [T, hidden/32] exactly, on the numpy path straight to the
    extension (int32 ids) and the converting one (int64 ids); the same size in another shape is refused."""
    c, s = pair(np.ones((4, H), np.float32))
    bad = [((c.reshape(4, H // 2, 2), s), "x codes must"),
           ((c, s.reshape(-1)), "x scales must"),
           ((c, s.T.copy()), "x scales must have shape"),
           ((c, np.concatenate([s, s], axis=1)), "x scales must have shape")]
    for ids_type in (np.int32, np.int64):
        for x, text in bad:
            said = calls_with_one_bad_rank(0, lambda _x, ids, w: (x, ids[:4].astype(ids_type), w[:4]))
            assert said[0].startswith("ValueError|") and text in said[0], (ids_type, said[0])
            assert said[1].startswith("PeerError|"), said[1]


def test_float_weights_of_another_type_are_refused_naming_them():
    """set_weights(w13 as float64, w2): the TypeError names w13 (not the quantizer's own "x")."""
    w13, w2 = expert_weights(2)

    def rank(comm):
        with a2amm.MoE(comm, experts=2, topk=1, hidden=H, inter=I, max_tokens=4) as moe:
            said = []
            for a, b in ((w13.astype(np.float64), w2), (w13, w2.astype(np.float16))):
                with pytest.raises(TypeError) as e:
                    moe.set_weights(a, b)
                said.append(str(e.value))
            return said

    said = a2amm.launch(1, rank)[0]
    assert said[0].startswith("w13 must be float32 or bfloat16") and "float64" in said[0], said
    assert said[1].startswith("w2 must be float32 or bfloat16") and "float16" in said[1], said
    with pytest.raises(TypeError, match="^w13 must be float32 or bfloat16.*float64"):
        a2amm.MoEWeights(w13.astype(np.float64), w2, max_rows=4)


# ---- topk_w: any floating type converted, the same on every path --------------------------------------------------

def test_topk_w_of_any_floating_type_gives_the_float32_bits_on_every_path():
    """float16 and float64 weights are converted to float32 on the numpy path straight to the extension (int32
    ids; float x or an MX pair) and on the converting one (int64 ids): the bits of the float32 call."""
    R, E, k = 2, 4, 2
    w13, w2 = expert_weights(E)

    def rank(comm):
        r, L = comm.rank, E // R
        x, ids, w = rank_tokens(r, R, E, k, 0)
        w = w.astype(np.float16).astype(np.float32)  # exact in float16 too
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
            want = moe(x, ids, w)
            same = []
            for xs in (x, pair(x)):
                for ids_type in (np.int32, np.int64):
                    for w_type in (np.float16, np.float64):
                        same.append(np.array_equal(moe(xs, ids.astype(ids_type), w.astype(w_type)), want))
            return same

    for same in a2amm.launch(R, rank):
        assert same == [True] * 8, same


@pytest.mark.parametrize("ids_type", [np.int32, np.int64])
def test_a_float64_weight_beyond_float32_is_refused_naming_token_and_slot(ids_type):
    def spoil(x, ids, w):
        w = w.astype(np.float64)
        w[3, 1] = 1e39
        return x, ids.astype(ids_type), w

    said = calls_with_one_bad_rank(0, spoil)
    assert said[0].startswith("ArgumentError|rank 0: token 3, slot 1: the weight 1e+39 is beyond float32's range"), said
    assert said[1].startswith("PeerError|") and "rank 0" in said[1], said[1]


@pytest.mark.parametrize("w_type", [np.int64, np.int32, np.bool_])
@pytest.mark.parametrize("ids_type", [np.int32, np.int64])
def test_topk_w_of_integers_is_refused_on_every_path(w_type, ids_type):
    said = calls_with_one_bad_rank(1, lambda x, ids, w: (x, ids.astype(ids_type), np.ones_like(w, dtype=w_type)))
    assert said[1].startswith("TypeError|topk_w must be floating point") and np.dtype(w_type).name in said[1], said
    assert said[0].startswith("PeerError|") and "rank 1" in said[0], said[0]


@needs_torch
def test_topk_w_as_torch_tensors_of_other_types():
    """torch float64 and bfloat16 weights are converted (bfloat16 by value, not as its bits); an int64
    tensor is a TypeError naming topk_w."""
    import torch
    E, k = 2, 2
    w13, w2 = expert_weights(E)

    def rank(comm):
        x, ids, w = rank_tokens(0, 1, E, k, 0)
        w = torch.from_numpy(w).bfloat16().float()  # exact in bfloat16 too
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            moe.set_weights(w13, w2)
            want = moe(x, ids, w.numpy())
            return [np.array_equal(moe(x, ids, w.to(t)), want) for t in (torch.float64, torch.bfloat16)]

    def integers(comm):
        x, ids, w = rank_tokens(0, 1, E, k, 0)
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            moe.set_weights(w13, w2)
            moe(x, ids, torch.from_numpy(w).long())

    assert a2amm.launch(1, rank) == [[True, True]]
    with pytest.raises(a2amm.Error, match="TypeError: topk_w must be floating point.*got torch.int64"):
        a2amm.launch(1, integers)


def test_expert_rows_are_held_to_their_whole_shape():
    """moe.expert takes rows as dispatch gives them, codes [n, hidden] and scales [n, hidden/32] exactly: wider
    scales or another shape of the same size are refused naming them."""
    w13, w2 = expert_weights(2)
    c, s = pair(np.ones((4, H), np.float32))

    def rank(comm):
        said = []
        with a2amm.MoE(comm, experts=2, topk=1, hidden=H, inter=I, max_tokens=4) as moe:
            moe.set_weights(w13, w2)
            for rows in ((c, np.concatenate([s, s], axis=1)), (c, s.T.copy()), (c.reshape(8, H // 2), s)):
                with pytest.raises(ValueError) as e:
                    moe.expert(0, rows)
                said.append(str(e.value))
        return said

    said = a2amm.launch(1, rank)[0]
    assert said[0] == "scales must have shape [rows, hidden/32] = [4, 2]; got (4, 4)", said
    assert said[1] == "scales must have shape [rows, hidden/32] = [4, 2]; got (2, 4)", said
    assert said[2].startswith("codes must have shape [rows, hidden] = [rows, 64]; got (8, 32)"), said


def test_tiny_outputs_are_held_to_the_contracts_absolute_term():
    """W2 2^-105 smaller (outputs near 1e-32, fp32 and bf16 still normal there): the op's values are within
    the contract's bound, whose absolute term A is bf16's and fp32's rounding below the smallest normal, and
    zeros in their place are not (an absolute floor of the tolerance kind, 1e-30 say, would take them)."""
    R, E, k = 2, 4, 2
    w13, w2 = expert_weights(E)
    w2 = (w2 * 2.0 ** -105).astype(np.float32)

    def rank(comm):
        r, L = comm.rank, E // R
        x, ids, w = rank_tokens(r, R, E, k, 0)
        with a2amm.MoE(comm, experts=E, topk=k, hidden=H, inter=I, max_tokens=MAX_T) as moe:
            moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
            return moe(x, ids, w)

    results = a2amm.launch(R, rank)
    for r in range(R):
        x, ids, w = rank_tokens(r, R, E, k, 0)
        got = a2amm.bf16_to_float32(results[r])
        assert 0 < np.abs(got).max() < 1e-29, np.abs(got).max()
        check(results[r], x, ids, w, w13, w2, R, "W2 2^-105, rank %d" % r)
        with pytest.raises(AssertionError, match="off the fp64 bound"):
            check(np.zeros_like(results[r]), x, ids, w, w13, w2, R, "zeros, rank %d" % r)


class _MoEConfig(ctypes.Structure):
    """a2amm.h's a2amm_moe_config, to ask the library's a2amm_moe_heap_bytes itself."""
    _fields_ = [("size", ctypes.c_size_t), ("experts", ctypes.c_int), ("topk", ctypes.c_int),
                ("hidden", ctypes.c_int64), ("inter", ctypes.c_int64), ("max_tokens", ctypes.c_int64),
                ("max_recv", ctypes.c_int64), ("a_type", ctypes.c_int), ("b_type", ctypes.c_int),
                ("threads", ctypes.c_int), ("timeout_s", ctypes.c_double), ("schedule", ctypes.c_int)]


def c_moe_heap_bytes(R, E, k, T):
    lib = ctypes.CDLL(a2amm.library_path)
    lib.a2amm_moe_heap_bytes.argtypes = [ctypes.POINTER(_MoEConfig), ctypes.c_int, ctypes.POINTER(ctypes.c_size_t),
                                         ctypes.c_void_p]
    cfg = _MoEConfig(size=ctypes.sizeof(_MoEConfig), experts=E, topk=k, hidden=H, inter=I, max_tokens=T)
    need = ctypes.c_size_t(0)
    assert lib.a2amm_moe_heap_bytes(ctypes.byref(cfg), R, ctypes.byref(need), None) == 0
    return need.value


def test_heap_bytes_is_the_c_query_and_what_making_one_takes():
    """MoE.heap_bytes is a2amm_moe_heap_bytes: in a heap of that size the op is made and runs within the
    bound; in one a page smaller making it is refused on every rank, naming the bytes it needs and
    a2amm_moe_heap_bytes (not the matmul op's query), and the communicator goes on."""
    R, E, k, T = 2, 4, 2, 150
    shape = dict(experts=E, topk=k, hidden=H, inter=I, max_tokens=T)
    need = a2amm.MoE.heap_bytes(R, **shape)
    assert need == c_moe_heap_bytes(R, E, k, T) and need > 4096, need
    assert a2amm.MoE.heap_bytes(4, **shape) == c_moe_heap_bytes(4, E, k, T) != need
    w13, w2 = expert_weights(E)

    def tokens(r):
        rng = np.random.default_rng(31 + r)
        x = rng.standard_normal((T, H)).astype(np.float32)
        ids = np.stack([rng.permutation(E)[:k] for _ in range(T)]).astype(np.int32)
        return x, ids, rng.random((T, k)).astype(np.float32)

    def rank(comm):
        r, L = comm.rank, E // R
        try:
            moe = a2amm.MoE(comm, **shape)
        except a2amm.Error as e:
            refused = "%s|%d|%s" % (type(e).__name__, e.code, e)
            comm.barrier()  # the communicator is still usable
            return refused
        with moe:
            moe.set_weights(w13[r * L:(r + 1) * L], w2[r * L:(r + 1) * L])
            return moe(*tokens(r))

    results = a2amm.launch(R, rank, heap_bytes=need)
    for r in range(R):
        check(results[r], *tokens(r), w13, w2, R, "a heap of MoE.heap_bytes, rank %d" % r)
    smaller = (need - 1) & ~4095  # heaps are whole pages
    for r, said in enumerate(a2amm.launch(R, rank, heap_bytes=smaller)):
        assert isinstance(said, str) and said.startswith("Error|%d|a2amm_moe_create: " % a2amm.E_NOMEM), (r, said)
        assert "stage needs %d bytes" % need in said and "a2amm_moe_heap_bytes" in said, (r, said)
        assert "a2amm_op_heap_bytes" not in said, (r, said)


def test_heap_bytes_refuses_what_making_one_refuses():
    with pytest.raises(a2amm.ArgumentError, match="a2amm_moe_heap_bytes: topk must be 1 to 32"):
        a2amm.MoE.heap_bytes(2, experts=8, topk=33, hidden=H, inter=I, max_tokens=4)
    with pytest.raises(a2amm.ArgumentError, match="a2amm_moe_heap_bytes: experts must be a positive multiple"):
        a2amm.MoE.heap_bytes(2, experts=3, topk=1, hidden=H, inter=I, max_tokens=4)
    with pytest.raises(ValueError, match='w_fmt must be "e4m3" or "e5m2"; got \'e3m4\''):
        a2amm.MoE.heap_bytes(2, experts=8, topk=1, hidden=H, inter=I, max_tokens=4, w_fmt="e3m4")
    with pytest.raises(ValueError, match='schedule must be "fused" or "unfused" or "overlap"; got \'overlapped\''):
        a2amm.MoE.heap_bytes(2, experts=8, topk=1, hidden=H, inter=I, max_tokens=4, schedule="overlapped")
