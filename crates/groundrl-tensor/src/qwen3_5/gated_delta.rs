//! The gated delta rule (Yang, Kautz and Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with
//! Delta Rule", ICLR 2025), as Qwen3.5's linear-attention layers run it.
//!
//! Each head keeps a state `S` (key dim x value dim). At token t, with its L2-normalised key `k`, value
//! `v`, query `q` (L2-normalised, then scaled by 1/sqrt(key dim)), log-decay `g <= 0` and write
//! strength `beta` in (0, 1):
//!
//! ```text
//! S <- exp(g) S                       the state fades
//! S <- S + k (beta (v - S^T k))^T     the delta rule: write the part of v that S does not predict
//! o  = S^T q
//! ```
//!
//! [`recurrent`] runs that token by token (decoding: one token, carrying the state). [`chunked`] runs
//! the same in chunks of tokens with a few matmuls each: within a chunk, with `G_i` the sum of `g`
//! from the chunk's start to token i and `S0` the state before it, the writes `u_i = beta_i (v_i -
//! (exp(g_i) S_{i-1})^T k_i)` solve the unit lower-triangular system
//!
//! ```text
//! u_i + sum_{j<i} beta_i exp(G_i - G_j) (k_i . k_j) u_j = beta_i v_i - beta_i exp(G_i) S0^T k_i
//! ```
//!
//! after which `o_i = exp(G_i) S0^T q_i + sum_{j<=i} exp(G_i - G_j) (q_i . k_j) u_j` and the state after
//! the chunk is `exp(G_n) S0 + sum_j exp(G_n - G_j) k_j u_j^T`. Both forms compute in f32 (f64 inputs
//! stay f64) and are differentiable (libtorch's autograd through every operation, the triangular
//! solve included).

use tch::{Kind, Tensor};

use crate::model_error::ModelError;

/// The epsilon of the L2 normalisation of queries and keys (as the FLA library's kernels use it).
pub(crate) const L2_EPS: f64 = 1e-6;

/// One layer's inputs, every query and key head already repeated to the value heads: `q`, `k`
/// (B, L, H, dk), `v` (B, L, H, dv), the log-decay `g` and the write strength `beta` (B, L, H).
#[derive(Debug)]
pub struct DeltaInputs<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub g: &'a Tensor,
    pub beta: &'a Tensor,
}

/// The rule's result: the output (B, L, H, dv) in the value's dtype, and each head's state after the
/// last token (B, H, dk, dv) in the computing dtype, to carry into the next call.
#[derive(Debug)]
pub struct DeltaOutput {
    pub out: Tensor,
    pub state: Tensor,
}

/// The inputs as the rule computes with them: heads first, (B, H, L, d) and (B, H, L).
struct Prepared {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
}

impl Prepared {
    fn of(x: &DeltaInputs) -> Result<Self, ModelError> {
        let [b, l, h, dk] = x.q.size()[..] else {
            return Err(shape_error(x));
        };
        let dv = x.v.size().last().copied().unwrap_or(0);
        if x.k.size() != [b, l, h, dk] || x.v.size() != [b, l, h, dv] {
            return Err(shape_error(x));
        }
        if x.g.size() != [b, l, h] || x.beta.size() != [b, l, h] {
            return Err(shape_error(x));
        }
        let kind = match x.v.kind() {
            Kind::Double => Kind::Double,
            _ => Kind::Float,
        };
        let heads_first = |t: &Tensor| t.f_to_kind(kind)?.f_transpose(1, 2);
        let unit = |t: &Tensor| -> Result<Tensor, tch::TchError> {
            let t = heads_first(t)?;
            let norm = t
                .f_square()?
                .f_sum_dim_intlist(-1, true, kind)?
                .f_add_scalar(L2_EPS)?
                .f_rsqrt()?;
            t.f_mul(&norm)
        };
        Ok(Self {
            q: unit(x.q)?.f_mul_scalar(1.0 / (dk as f64).sqrt())?,
            k: unit(x.k)?,
            v: heads_first(x.v)?,
            g: heads_first(x.g)?,
            beta: heads_first(x.beta)?,
        })
    }

    /// The state to start from: `state` (B, H, dk, dv), or zeros.
    fn initial(&self, state: Option<&Tensor>) -> Result<Tensor, ModelError> {
        let (q, v) = (self.q.size(), self.v.size());
        let shape = [q[0], q[1], q[3], v[3]];
        match state {
            Some(s) if s.size() != shape => Err(ModelError::Input(format!(
                "gated delta state {:?}, expected {shape:?}",
                s.size()
            ))),
            Some(s) => Ok(s.f_to_kind(self.v.kind())?),
            None => Ok(Tensor::f_zeros(shape, (self.v.kind(), self.v.device()))?),
        }
    }
}

fn shape_error(x: &DeltaInputs) -> ModelError {
    ModelError::Input(format!(
        "gated delta rule wants q, k (B, L, H, dk), v (B, L, H, dv), g and beta (B, L, H); got q {:?}, \
         k {:?}, v {:?}, g {:?}, beta {:?}",
        x.q.size(),
        x.k.size(),
        x.v.size(),
        x.g.size(),
        x.beta.size()
    ))
}

/// The rule token by token, from `state` (B, H, dk, dv; `None`: zeros).
pub fn recurrent(x: &DeltaInputs, state: Option<&Tensor>) -> Result<DeltaOutput, ModelError> {
    let p = Prepared::of(x)?;
    let mut s = p.initial(state)?;
    let len = p.q.size()[2];
    let mut outs = Vec::with_capacity(len as usize);
    for t in 0..len {
        let at = |x: &Tensor| x.f_select(2, t);
        let (q, k, v) = (at(&p.q)?, at(&p.k)?, at(&p.v)?);
        s = s.f_mul(&at(&p.g)?.f_exp()?.f_unsqueeze(-1)?.f_unsqueeze(-1)?)?;
        // S^T k as a row: (B, H, 1, dk) x (B, H, dk, dv).
        let read = k.f_unsqueeze(-2)?.f_matmul(&s)?.f_squeeze_dim(-2)?;
        let write = v.f_sub(&read)?.f_mul(&at(&p.beta)?.f_unsqueeze(-1)?)?;
        s = s.f_add(&k.f_unsqueeze(-1)?.f_matmul(&write.f_unsqueeze(-2)?)?)?;
        outs.push(q.f_unsqueeze(-2)?.f_matmul(&s)?.f_squeeze_dim(-2)?);
    }
    finish(x, Tensor::f_stack(&outs, 2)?, s)
}

/// The rule in chunks of `chunk` tokens, from `state` (B, H, dk, dv; `None`: zeros): the module doc's
/// solve. What a chunk computes from its own tokens (decays, the triangular solves, the scores) runs
/// for all chunks at once; only the state's hand-over runs chunk by chunk (two matmuls each), and
/// the outputs from the states before each chunk at once again. The last chunk is filled up with
/// zeros (no decay, no write: the state passes them unchanged) whose outputs are dropped.
pub fn chunked(x: &DeltaInputs, chunk: i64, state: Option<&Tensor>) -> Result<DeltaOutput, ModelError> {
    if chunk < 1 {
        return Err(ModelError::Input(format!("gated delta chunk of {chunk} tokens")));
    }
    let p = Prepared::of(x)?;
    let mut s = p.initial(state)?;
    let len = p.q.size()[2];
    let chunks = (len + chunk - 1) / chunk;
    // (B, H, L, ...) -> (B, H, chunks, chunk, ...), zeros after the last token.
    let split = |t: &Tensor| -> Result<Tensor, tch::TchError> {
        let size = t.size();
        let mut pad = vec![0; 2 * (size.len() - 3)];
        pad.extend([0, chunks * chunk - len]);
        let mut shape = size[..2].to_vec();
        shape.extend([chunks, chunk]);
        shape.extend(&size[3..]);
        t.f_constant_pad_nd(pad.as_slice())?.f_reshape(shape.as_slice())
    };
    let (q, k, v) = (split(&p.q)?, split(&p.k)?, split(&p.v)?);
    let (g, beta) = (split(&p.g)?, split(&p.beta)?);
    let local = Chunks::of((&q, &k, &v), (&g, &beta))?;
    let at = |t: &Tensor, c: i64| t.f_select(2, c);
    let (mut before, mut writes) = (Vec::new(), Vec::new());
    for c in 0..chunks {
        let w = at(&local.fresh, c)?.f_sub(&at(&local.from_state, c)?.f_matmul(&s)?)?;
        let next = s
            .f_mul(&at(&local.carry, c)?)?
            .f_add(&at(&local.faded, c)?.f_transpose(-1, -2)?.f_matmul(&w)?)?;
        before.push(std::mem::replace(&mut s, next));
        writes.push(w);
    }
    let (before, writes) = (Tensor::f_stack(&before, 2)?, Tensor::f_stack(&writes, 2)?);
    let out = local
        .grown_q
        .f_matmul(&before)?
        .f_add(&local.scores.f_matmul(&writes)?)?;
    let size = out.size();
    let out = out
        .f_reshape([size[0], size[1], chunks * chunk, size[4]])?
        .f_narrow(2, 0, len)?;
    finish(x, out, s)
}

/// What each chunk computes from its own tokens, for all chunks at once: with q, k (B, H, C, n, dk),
/// v (B, H, C, n, dv), g and beta (B, H, C, n), and the state `S0` before a chunk, its writes are
/// `fresh - from_state S0`, its output `grown_q S0 + scores writes` and the state after it `carry S0 +
/// faded^T writes`.
struct Chunks {
    fresh: Tensor,
    from_state: Tensor,
    grown_q: Tensor,
    scores: Tensor,
    faded: Tensor,
    carry: Tensor,
}

impl Chunks {
    fn of((q, k, v): (&Tensor, &Tensor, &Tensor), (g, beta): (&Tensor, &Tensor)) -> Result<Self, ModelError> {
        let n = q.size()[3];
        let sums = g.f_cumsum(-1, g.kind())?;
        // exp(G_i - G_j) where j <= i, 0 above the diagonal (masked before the exp, which would overflow).
        let above = Tensor::f_ones([n, n], (Kind::Bool, q.device()))?.f_triu(1)?;
        let decay = sums
            .f_unsqueeze(-1)?
            .f_sub(&sums.f_unsqueeze(-2)?)?
            .f_masked_fill(&above, f64::NEG_INFINITY)?
            .f_exp()?;
        let beta = beta.f_unsqueeze(-1)?;
        let grown = sums.f_exp()?.f_unsqueeze(-1)?;
        // The system's strictly lower part: beta_i exp(G_i - G_j) k_i . k_j (its diagonal is taken as 1).
        let system = k.f_mul(&beta)?.f_matmul(&k.f_transpose(-1, -2)?)?.f_mul(&decay)?;
        let solve = |rhs: &Tensor| system.f_linalg_solve_triangular(rhs, false, true, true);
        let total = sums.f_narrow(-1, n - 1, 1)?;
        Ok(Self {
            fresh: solve(&v.f_mul(&beta)?)?,
            from_state: solve(&k.f_mul(&beta)?.f_mul(&grown)?)?,
            grown_q: q.f_mul(&grown)?,
            scores: q.f_matmul(&k.f_transpose(-1, -2)?)?.f_mul(&decay)?,
            faded: k.f_mul(&total.f_sub(&sums)?.f_exp()?.f_unsqueeze(-1)?)?,
            carry: total.f_exp()?.f_unsqueeze(-1)?,
        })
    }
}

/// The output back in the inputs' layout (B, L, H, dv) and the value's dtype.
fn finish(x: &DeltaInputs, heads_first: Tensor, state: Tensor) -> Result<DeltaOutput, ModelError> {
    Ok(DeltaOutput {
        out: heads_first
            .f_transpose(1, 2)?
            .f_contiguous()?
            .f_to_kind(x.v.kind())?,
        state,
    })
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::*;

    /// Random inputs in f64: decays of -softplus(normal) (some near 0, some strong), beta in (0, 1).
    fn inputs(b: i64, l: i64, h: i64, dk: i64, dv: i64) -> [Tensor; 5] {
        let opts = (Kind::Double, Device::Cpu);
        [
            Tensor::randn([b, l, h, dk], opts),
            Tensor::randn([b, l, h, dk], opts),
            Tensor::randn([b, l, h, dv], opts),
            -Tensor::randn([b, l, h], opts).softplus(),
            Tensor::randn([b, l, h], opts).sigmoid(),
        ]
    }

    fn view(t: &[Tensor; 5]) -> DeltaInputs<'_> {
        DeltaInputs {
            q: &t[0],
            k: &t[1],
            v: &t[2],
            g: &t[3],
            beta: &t[4],
        }
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[])
    }

    /// Chunks of 1, 8 (a last chunk of 5) and 64 (one short chunk) against the token-by-token form,
    /// from zeros and from a given state: outputs and final states equal to f64 rounding.
    #[test]
    fn the_chunked_form_equals_the_recurrent_one() {
        tch::manual_seed(11);
        let t = inputs(2, 37, 3, 8, 5);
        let start = Tensor::randn([2, 3, 8, 5], (Kind::Double, Device::Cpu));
        for state in [None, Some(&start)] {
            let want = recurrent(&view(&t), state).unwrap();
            for chunk in [1, 8, 64] {
                let got = chunked(&view(&t), chunk, state).unwrap();
                assert_eq!(got.out.size(), [2, 37, 3, 5]);
                assert!(
                    max_diff(&got.out, &want.out) < 1e-10,
                    "chunk {chunk}: {}",
                    max_diff(&got.out, &want.out)
                );
                assert!(max_diff(&got.state, &want.state) < 1e-10, "chunk {chunk} state");
            }
        }
    }

    /// A prompt run in two calls, the state carried, equals one call over the whole.
    #[test]
    fn a_carried_state_continues_the_sequence() {
        tch::manual_seed(12);
        let t = inputs(1, 20, 2, 4, 4);
        let whole = chunked(&view(&t), 8, None).unwrap();
        let first: Vec<Tensor> = t.iter().map(|x| x.narrow(1, 0, 13)).collect();
        let rest: Vec<Tensor> = t.iter().map(|x| x.narrow(1, 13, 7)).collect();
        let as_five = |v: Vec<Tensor>| -> [Tensor; 5] { v.try_into().unwrap() };
        let (first, rest) = (as_five(first), as_five(rest));
        let a = chunked(&view(&first), 8, None).unwrap();
        let b = recurrent(&view(&rest), Some(&a.state)).unwrap();
        let joined = Tensor::cat(&[&a.out, &b.out], 1);
        assert!(max_diff(&joined, &whole.out) < 1e-10);
        assert!(max_diff(&b.state, &whole.state) < 1e-10);
    }

    /// The gradients of every input through the chunked form equal those through the recurrent one.
    #[test]
    fn the_chunked_forms_gradients_equal_the_recurrent_ones() {
        tch::manual_seed(13);
        let data = inputs(1, 19, 2, 4, 3);
        let weights = Tensor::randn([1, 19, 2, 3], (Kind::Double, Device::Cpu));
        let grads = |run: &dyn Fn(&DeltaInputs) -> DeltaOutput| -> Vec<Tensor> {
            let leaves: Vec<Tensor> = data.iter().map(|x| x.detach().set_requires_grad(true)).collect();
            let leaves: [Tensor; 5] = leaves.try_into().unwrap();
            let out = run(&view(&leaves));
            ((&out.out * &weights).sum(Kind::Double) + out.state.sum(Kind::Double)).backward();
            leaves.iter().map(Tensor::grad).collect()
        };
        let want = grads(&|x| recurrent(x, None).unwrap());
        let got = grads(&|x| chunked(x, 6, None).unwrap());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(max_diff(a, b) < 1e-9, "input {i}: {}", max_diff(a, b));
        }
    }

    /// transformers 5.17's `torch_chunk_gated_delta_rule` (chunks of 64) and
    /// `torch_recurrent_gated_delta_rule` on 70 tokens from a given state, in f32
    /// (`scripts/goldens/qwen3_5_gated_delta.py`): ours in f32 within 1e-5 of their largest value.
    #[test]
    fn both_forms_equal_transformers_reference_functions() {
        let named = super::super::golden::read("gated_delta.safetensors");
        let t = |name: &str| named[name].shallow_clone();
        let data = [t("q"), t("k"), t("v"), t("g"), t("beta")];
        let state = t("state");
        let close = |got: &Tensor, want: &Tensor, what: &str| {
            let scale = want.abs().max().double_value(&[]);
            let diff = max_diff(got, want);
            assert!(diff <= 1e-5 * scale, "{what}: {diff:e} of {scale}");
        };
        let chunk = chunked(&view(&data), 64, Some(&state)).unwrap();
        close(&chunk.out, &t("chunk_out"), "chunked output");
        close(&chunk.state, &t("chunk_state"), "chunked state");
        let steps = recurrent(&view(&data), Some(&state)).unwrap();
        close(&steps.out, &t("recurrent_out"), "recurrent output");
        close(&steps.state, &t("recurrent_state"), "recurrent state");
        assert_eq!(chunk.out.kind(), Kind::Float);
    }

    #[test]
    fn bad_shapes_and_chunks_are_refused() {
        let t = inputs(1, 4, 2, 4, 3);
        let bad_g = Tensor::zeros([1, 4, 3], (Kind::Double, Device::Cpu));
        let x = DeltaInputs {
            g: &bad_g,
            ..view(&t)
        };
        assert!(
            recurrent(&x, None)
                .unwrap_err()
                .to_string()
                .contains("g and beta (B, L, H)")
        );
        assert!(chunked(&view(&t), 0, None).is_err());
        let state = Tensor::zeros([1, 2, 3, 4], (Kind::Double, Device::Cpu));
        assert!(recurrent(&view(&t), Some(&state)).is_err(), "dk and dv swapped");
    }
}
