//! libtorch is linked and works: tensors, autograd and scaled-dot-product attention on the CPU, and
//! CUDA when a GPU build runs on the GPU machine.

use tch::{Device, Kind, Tensor};

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

#[test]
fn tensor_arithmetic() {
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).reshape([2, 2]);
    let m = t.matmul(&t);
    assert_eq!(
        Vec::<f32>::try_from(m.flatten(0, -1)).unwrap(),
        vec![7.0, 10.0, 15.0, 22.0]
    );
}

#[test]
fn backward_pass_gives_analytic_gradient() {
    // d/dx sum(x^3) = 3 x^2
    let x = Tensor::from_slice(&[1.0f64, -2.0, 0.5]).set_requires_grad(true);
    let y = x.pow_tensor_scalar(3).sum(Kind::Double);
    y.backward();
    let grad = Vec::<f64>::try_from(x.grad()).unwrap();
    assert_eq!(grad, vec![3.0, 12.0, 0.75]);
}

#[test]
fn sdpa_matches_explicit_attention_and_differentiates() {
    tch::manual_seed(0);
    let opts = (Kind::Float, Device::Cpu);
    let q = Tensor::randn([2, 4, 5, 8], opts).set_requires_grad(true);
    let k = Tensor::randn([2, 4, 5, 8], opts);
    let v = Tensor::randn([2, 4, 5, 8], opts);
    let out = Tensor::scaled_dot_product_attention(&q, &k, &v, None::<Tensor>, 0.0, true, None, false);

    let scores = q.matmul(&k.transpose(-2, -1)) / (8f64).sqrt();
    let causal = Tensor::ones([5, 5], (Kind::Bool, Device::Cpu)).triu(1);
    let reference = scores
        .masked_fill(&causal, f64::NEG_INFINITY)
        .softmax(-1, Kind::Float)
        .matmul(&v);
    assert!(max_abs_diff(&out, &reference) < 1e-5);

    out.sum(Kind::Float).backward();
    let grad = q.grad();
    assert_eq!(grad.size(), vec![2, 4, 5, 8]);
    assert!(grad.isfinite().all().int64_value(&[]) == 1);
    assert!(grad.abs().sum(Kind::Float).double_value(&[]) > 0.0);
}

/// On the GPU machine, a `cuda` build must see the GPU (set GROUNDRL_EXPECT_CUDA=1 there).
#[test]
fn cuda_is_visible_when_expected() {
    if std::env::var_os("GROUNDRL_EXPECT_CUDA").is_none() {
        return;
    }
    assert!(
        tch::Cuda::is_available(),
        "CUDA not available: was the test built with --features cuda?"
    );
    let x = Tensor::randn([64, 64], (Kind::BFloat16, Device::Cuda(0)));
    let y = x.matmul(&x);
    assert_eq!(y.device(), Device::Cuda(0));
    assert!(y.isfinite().all().int64_value(&[]) == 1);
}
