//! AdamW against hand-computed values, gradient clipping, the non-finite skip, f32 master weights, the
//! learning-rate schedule, and exact resumption from the exported state.

use groundrl_train::optim::{AdamW, OptimConfig, Schedule, StepOutcome, lr_at};
use tch::{Kind, Tensor};

/// A plain config: no weight decay, no clipping, f32 masters on.
fn plain(lr: f64) -> OptimConfig {
    OptimConfig {
        lr,
        weight_decay: 0.0,
        grad_clip: 0.0,
        ..OptimConfig::default()
    }
}

fn param(values: &[f32], kind: Kind) -> Tensor {
    Tensor::from_slice(values).to_kind(kind).set_requires_grad(true)
}

/// Accumulates `grad` into `p.grad` through a backward pass of `sum(p × grad)`.
fn give_grad(p: &Tensor, grad: &[f32]) {
    let grad = Tensor::from_slice(grad).to_kind(p.kind());
    (p * grad).sum(Kind::Float).backward();
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&t.to_kind(Kind::Double).flatten(0, -1)).unwrap()
}

/// Equal to a relative 1e-6: what f32 arithmetic leaves of hand-computed values.
fn assert_close(actual: &[f64], expected: &[f64]) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() <= 1e-6 * e.abs(), "{actual:?} vs {expected:?}");
    }
}

fn state_of(opt: &AdamW, name: &str) -> Tensor {
    let state = opt.state();
    let (_, t) = state
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no state `{name}`"));
    t.copy()
}

fn snapshot(opt: &AdamW) -> Vec<(String, Tensor)> {
    opt.state().into_iter().map(|(n, t)| (n, t.copy())).collect()
}

fn assert_same(a: &[(String, Tensor)], b: &[(String, Tensor)]) {
    assert_eq!(a.len(), b.len());
    for ((na, ta), (nb, tb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        assert!(ta.equal(tb), "`{na}` differs: {ta} vs {tb}");
    }
}

#[test]
fn two_steps_match_the_hand_computed_update() {
    // lr 0.1, β1 0.9, β2 0.999, eps 1e-8, no decay; p = [1, -2].
    // Step 1, g = [0.5, -1]: m = 0.1 g = [0.05, -0.1]; v = 0.001 g² = [0.00025, 0.001];
    //   m̂ = m / 0.1 = [0.5, -1]; √v̂ = √(v / 0.001) = [0.5, 1]; p -= 0.1 × m̂ / (√v̂ + 1e-8)
    //   = [0.1, -0.1] (to 2e-9) → p = [0.9, -1.9].
    // Step 2, g = [-0.5, 2]: m = 0.9 m + 0.1 g = [-0.005, 0.11];
    //   v = 0.999 v + 0.001 g² = [0.00049975, 0.004999]; bias corrections 1 − 0.9² = 0.19, 1 − 0.999² = 0.001999;
    //   m̂ = [-0.0263157895, 0.5789473684]; √v̂ = [√0.25, √2.5007503752] = [0.5, 1.5813761018];
    //   p -= 0.1 × m̂ / √v̂ = [-0.0052631579, 0.0366103527] → p = [0.9052631579, -1.9366103527].
    let p = param(&[1.0, -2.0], Kind::Float);
    let mut opt = AdamW::new(vec![("p".into(), p.shallow_clone())], &plain(0.1)).unwrap();
    give_grad(&p, &[0.5, -1.0]);
    let outcome = opt.step(0.1).unwrap();
    assert_eq!(
        outcome,
        StepOutcome::Applied {
            grad_norm: 1.25f32.sqrt() as f64,
            clipped: false
        }
    );
    assert_close(&values(&p), &[0.9, -1.9]);
    assert_close(&values(&state_of(&opt, "exp_avg/p")), &[0.05, -0.1]);
    assert_close(&values(&state_of(&opt, "exp_avg_sq/p")), &[0.00025, 0.001]);

    opt.zero_grad().unwrap();
    give_grad(&p, &[-0.5, 2.0]);
    opt.step(0.1).unwrap();
    assert_close(&values(&p), &[0.9052631579, -1.9366103527]);
    assert_close(&values(&state_of(&opt, "exp_avg/p")), &[-0.005, 0.11]);
    assert_close(&values(&state_of(&opt, "exp_avg_sq/p")), &[0.00049975, 0.004999]);
    assert_eq!(values(&state_of(&opt, "step/p")), [2.0]);
}

#[test]
fn weight_decay_is_decoupled_from_the_gradient() {
    // lr 0.1, weight_decay 0.1: p ← p × (1 − 0.01) before the Adam step.
    // Zero gradient: the Adam step is 0 / (0 + eps) = 0, so p = [1, -2] × 0.99 = [0.99, -1.98].
    // Gradient [0.5, -1]: the first Adam step is 0.1 × sign(g), so p = [0.99 − 0.1, -1.98 + 0.1].
    let cfg = OptimConfig {
        weight_decay: 0.1,
        ..plain(0.1)
    };
    let still = param(&[1.0, -2.0], Kind::Float);
    let moved = param(&[1.0, -2.0], Kind::Float);
    let named = vec![
        ("still".into(), still.shallow_clone()),
        ("moved".into(), moved.shallow_clone()),
    ];
    let mut opt = AdamW::new(named, &cfg).unwrap();
    give_grad(&still, &[0.0, 0.0]);
    give_grad(&moved, &[0.5, -1.0]);
    opt.step(0.1).unwrap();
    assert_close(&values(&still), &[0.99, -1.98]);
    assert_close(&values(&moved), &[0.89, -1.88]);
}

#[test]
fn gradients_are_clipped_by_their_global_norm() {
    // Two parameters with gradients [3] and [4]: global norm 5. Adam's first step is scale-free, so the
    // clipping shows in the first moment: m = 0.1 × g × scale.
    for (clip, clipped, scale) in [
        (1.0, true, 1.0 / (5.0 + 1e-6)),
        (10.0, false, 1.0),
        (0.0, false, 1.0),
    ] {
        let a = param(&[0.0], Kind::Float);
        let b = param(&[0.0], Kind::Float);
        let cfg = OptimConfig {
            grad_clip: clip,
            ..plain(0.1)
        };
        let named = vec![("a".into(), a.shallow_clone()), ("b".into(), b.shallow_clone())];
        let mut opt = AdamW::new(named, &cfg).unwrap();
        give_grad(&a, &[3.0]);
        give_grad(&b, &[4.0]);
        let outcome = opt.step(0.1).unwrap();
        assert_eq!(
            outcome,
            StepOutcome::Applied {
                grad_norm: 5.0,
                clipped
            },
            "clip {clip}"
        );
        assert_close(&values(&state_of(&opt, "exp_avg/a")), &[0.3 * scale]);
        assert_close(&values(&state_of(&opt, "exp_avg/b")), &[0.4 * scale]);
        // The gradients themselves are not rewritten.
        assert_eq!(values(&a.grad()), [3.0]);
    }
}

#[test]
fn a_non_finite_gradient_skips_the_step_and_changes_nothing() {
    let cfg = OptimConfig {
        weight_decay: 0.1,
        grad_clip: 1.0,
        ..plain(0.1)
    };
    let p = param(&[1.0, -2.0], Kind::BFloat16);
    let mut opt = AdamW::new(vec![("p".into(), p.shallow_clone())], &cfg).unwrap();
    let reference = param(&[1.0, -2.0], Kind::BFloat16);
    let mut undisturbed = AdamW::new(vec![("p".into(), reference.shallow_clone())], &cfg).unwrap();
    for (q, o) in [(&p, &mut opt), (&reference, &mut undisturbed)] {
        give_grad(q, &[0.5, -1.0]);
        o.step(0.1).unwrap();
        o.zero_grad().unwrap();
    }
    let (param_before, state_before) = (p.copy(), snapshot(&opt));

    for bad in [f32::NAN, f32::INFINITY] {
        opt.zero_grad().unwrap();
        give_grad(&p, &[bad, 1.0]);
        match opt.step(0.1).unwrap() {
            StepOutcome::Skipped { grad_norm } => assert!(!grad_norm.is_finite(), "{grad_norm}"),
            applied => panic!("expected a skip for {bad}, got {applied:?}"),
        }
        assert!(p.equal(&param_before));
        assert_same(&opt.state(), &state_before);
    }

    // The skipped steps left no trace: the next step is the undisturbed optimizer's second step.
    for (q, o) in [(&p, &mut opt), (&reference, &mut undisturbed)] {
        o.zero_grad().unwrap();
        give_grad(q, &[-0.5, 2.0]);
        o.step(0.1).unwrap();
    }
    assert!(p.equal(&reference));
    assert_same(&opt.state(), &undisturbed.state());
}

#[test]
fn parameters_without_a_gradient_are_left_alone() {
    let cfg = OptimConfig {
        weight_decay: 0.1,
        ..plain(0.1)
    };
    let used = param(&[1.0], Kind::Float);
    let unused = param(&[1.0], Kind::Float);
    let named = vec![
        ("used".into(), used.shallow_clone()),
        ("unused".into(), unused.shallow_clone()),
    ];
    let mut opt = AdamW::new(named, &cfg).unwrap();
    give_grad(&used, &[1.0]);
    opt.step(0.1).unwrap();
    // used: 1 × 0.99 − 0.1 = 0.89; unused: not even decayed.
    assert_close(&values(&used), &[0.89]);
    assert_eq!(values(&unused), [1.0]);
    assert_eq!(values(&state_of(&opt, "step/used")), [1.0]);
    assert_eq!(values(&state_of(&opt, "step/unused")), [0.0]);
}

#[test]
fn f32_master_weights_keep_updates_that_bf16_rounds_away() {
    // A constant gradient of 1 makes every Adam step exactly lr (m̂ = 1, √v̂ = 1): 10 steps of 1e-3 from
    // 1.0 give 0.99. bf16 spacing just below 1 is 2⁻⁸ = 0.0039: 1 − 0.001 rounds back to 1 every step,
    // while the master reaches 0.99, whose nearest bf16 is 253/256 = 0.98828125 (0.9921875 is farther).
    let run = |fp32_master: bool| {
        let p = param(&[1.0], Kind::BFloat16);
        let cfg = OptimConfig {
            fp32_master,
            ..plain(1e-3)
        };
        let mut opt = AdamW::new(vec![("p".into(), p.shallow_clone())], &cfg).unwrap();
        for _ in 0..10 {
            opt.zero_grad().unwrap();
            give_grad(&p, &[1.0]);
            opt.step(1e-3).unwrap();
        }
        (p, opt)
    };
    let (with_master, opt) = run(true);
    assert_eq!(values(&with_master), [0.98828125]);
    assert_close(&values(&state_of(&opt, "master/p")), &[0.99]);
    let (without, opt) = run(false);
    assert_eq!(values(&without), [1.0]);
    assert!(opt.state().iter().all(|(name, _)| !name.starts_with("master/")));
    assert_eq!(with_master.kind(), Kind::BFloat16);
}

#[test]
fn f32_parameters_get_no_master_copy() {
    let p = param(&[1.0], Kind::Float);
    let opt = AdamW::new(vec![("p".into(), p)], &OptimConfig::default()).unwrap();
    let names: Vec<String> = opt.state().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["exp_avg/p", "exp_avg_sq/p", "step/p"]);
}

/// Deterministic gradients that differ per step and element.
fn grads_for(step: usize, len: i64) -> Vec<f32> {
    (0..len)
        .map(|i| ((step as f32) * 1.3 + i as f32 * 0.7).sin())
        .collect()
}

fn run_steps(params: &[Tensor], opt: &mut AdamW, steps: std::ops::Range<usize>) {
    for step in steps {
        opt.zero_grad().unwrap();
        for p in params {
            give_grad(p, &grads_for(step, p.numel() as i64));
        }
        opt.step(0.01).unwrap();
    }
}

#[test]
fn continuing_from_a_saved_state_is_bit_identical() {
    let cfg = OptimConfig {
        weight_decay: 0.1,
        grad_clip: 0.5,
        ..OptimConfig::default()
    };
    for kind in [Kind::Float, Kind::BFloat16] {
        let fresh = || [param(&[0.5; 6], kind), param(&[-1.0, 0.0, 1.0, 2.0], kind)];
        let named = |ps: &[Tensor; 2]| {
            vec![
                ("w".to_string(), ps[0].shallow_clone()),
                ("b".into(), ps[1].shallow_clone()),
            ]
        };

        let straight = fresh();
        let mut opt = AdamW::new(named(&straight), &cfg).unwrap();
        run_steps(&straight, &mut opt, 0..4);

        let first = fresh();
        let mut stopped = AdamW::new(named(&first), &cfg).unwrap();
        run_steps(&first, &mut stopped, 0..2);
        let saved = snapshot(&stopped);
        let resumed_params = [
            first[0].detach().copy().set_requires_grad(true),
            first[1].detach().copy().set_requires_grad(true),
        ];
        drop((stopped, first));

        let mut resumed = AdamW::new(named(&resumed_params), &cfg).unwrap();
        resumed.load_state(&saved).unwrap();
        run_steps(&resumed_params, &mut resumed, 2..4);
        for (a, b) in straight.iter().zip(&resumed_params) {
            assert!(a.equal(b), "{kind:?}: {a} vs {b}");
        }
        assert_same(&resumed.state(), &opt.state());
    }
}

#[test]
fn load_state_names_the_tensor_that_does_not_fit() {
    let p = param(&[1.0, 2.0], Kind::BFloat16);
    let mut opt = AdamW::new(vec![("p".into(), p)], &OptimConfig::default()).unwrap();
    let good = snapshot(&opt);
    let with = |name: &str, replacement: Option<Tensor>| -> Vec<(String, Tensor)> {
        let mut state: Vec<_> = good
            .iter()
            .filter(|(n, _)| n != name)
            .map(|(n, t)| (n.clone(), t.copy()))
            .collect();
        state.extend(replacement.map(|t| (name.to_string(), t)));
        state
    };
    let cases = [
        (with("master/p", None), "master/p"),
        (
            with(
                "exp_avg/p",
                Some(Tensor::zeros([3], (Kind::Float, tch::Device::Cpu))),
            ),
            "exp_avg/p",
        ),
        (
            with(
                "exp_avg_sq/p",
                Some(Tensor::zeros([2], (Kind::BFloat16, tch::Device::Cpu))),
            ),
            "exp_avg_sq/p",
        ),
        (
            with(
                "exp_avg/q",
                Some(Tensor::zeros([2], (Kind::Float, tch::Device::Cpu))),
            ),
            "exp_avg/q",
        ),
    ];
    for (state, name) in cases {
        let err = opt.load_state(&state).unwrap_err().to_string();
        assert!(err.contains(&format!("`{name}`")), "{err}");
    }
    let err = opt
        .load_state(&with("step/p", Some(Tensor::from(-3i64))))
        .unwrap_err()
        .to_string();
    assert!(err.contains("step/p") && err.contains("-3"), "{err}");
    opt.load_state(&good).unwrap();
}

#[test]
fn bad_parameters_configs_and_learning_rates_are_refused_by_name() {
    let err = AdamW::new(
        vec![("ids".into(), Tensor::from_slice(&[1i64]))],
        &OptimConfig::default(),
    );
    assert!(err.err().unwrap().to_string().contains("`ids`"));
    let twice = vec![
        ("w".into(), param(&[1.0], Kind::Float)),
        ("w".into(), param(&[1.0], Kind::Float)),
    ];
    assert!(
        AdamW::new(twice, &OptimConfig::default())
            .err()
            .unwrap()
            .to_string()
            .contains("`w`")
    );
    let cfg = OptimConfig {
        beta2: 1.0,
        ..OptimConfig::default()
    };
    let err = AdamW::new(vec![], &cfg).err().unwrap().to_string();
    assert_eq!(err, "optim.beta2 must be in [0, 1)");
    let mut opt = AdamW::new(vec![], &OptimConfig::default()).unwrap();
    assert!(opt.step(f64::NAN).unwrap_err().to_string().contains("NaN"));
    assert_eq!(
        opt.step(1e-6).unwrap(),
        StepOutcome::Applied {
            grad_norm: 0.0,
            clipped: false
        }
    );
}

#[test]
fn the_config_has_documented_defaults_and_rejects_unknown_keys() {
    let cfg: OptimConfig = serde_json::from_str(r#"{"lr": 2e-6, "schedule": "cosine"}"#).unwrap();
    assert_eq!(
        cfg,
        OptimConfig {
            lr: 2e-6,
            schedule: Schedule::Cosine,
            ..OptimConfig::default()
        }
    );
    let d = OptimConfig::default();
    assert_eq!(
        (d.lr, d.beta1, d.beta2, d.eps, d.weight_decay),
        (1e-6, 0.9, 0.999, 1e-8, 0.01)
    );
    assert_eq!(
        (
            d.warmup_steps,
            d.schedule,
            d.min_lr_ratio,
            d.grad_clip,
            d.fp32_master
        ),
        (0, Schedule::Constant, 0.0, 1.0, true)
    );
    let err = serde_json::from_str::<OptimConfig>(r#"{"weight_decai": 0.1}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("weight_decai"), "{err}");
    let back: OptimConfig = serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
    assert_eq!(back, cfg);
}

#[test]
fn warmup_then_cosine_down_to_the_floor() {
    // lr 2, warmup 4, 12 steps, floor 0.1 × lr.
    let cfg = OptimConfig {
        lr: 2.0,
        warmup_steps: 4,
        schedule: Schedule::Cosine,
        min_lr_ratio: 0.1,
        ..OptimConfig::default()
    };
    let at = |step| lr_at(step, 12, &cfg);
    // Warmup: 2 × (s + 1) / 4.
    assert_eq!([at(0), at(1), at(3)], [0.5, 1.0, 2.0]);
    // Cosine from step 4 over 8 steps: 2 × (0.1 + 0.9 × ½(1 + cos(π p))).
    assert_eq!(at(4), 2.0);
    // p = 0.25: ½(1 + cos(π/4)) = 0.8535533906 → 2 × (0.1 + 0.9 × 0.8535533906) = 1.7363961031.
    assert!((at(6) - 1.7363961031).abs() < 1e-9, "{}", at(6));
    // p = 0.5: cos = 0 → 2 × (0.1 + 0.45) = 1.1.
    assert!((at(8) - 1.1).abs() < 1e-12, "{}", at(8));
    // The end and beyond: the floor 0.2.
    assert!((at(12) - 0.2).abs() < 1e-12 && (at(50) - 0.2).abs() < 1e-12);
}

#[test]
fn constant_schedule_with_and_without_warmup() {
    let cfg = OptimConfig {
        lr: 1e-6,
        ..OptimConfig::default()
    };
    assert_eq!(
        [lr_at(0, 10, &cfg), lr_at(9, 10, &cfg), lr_at(99, 10, &cfg)],
        [1e-6; 3]
    );
    let cfg = OptimConfig {
        lr: 1.0,
        warmup_steps: 4,
        ..OptimConfig::default()
    };
    assert_eq!(
        [
            lr_at(0, 10, &cfg),
            lr_at(2, 10, &cfg),
            lr_at(3, 10, &cfg),
            lr_at(9, 10, &cfg)
        ],
        [0.25, 0.75, 1.0, 1.0]
    );
}

#[test]
fn a_cosine_run_no_longer_than_its_warmup_decays_in_one_step() {
    let cfg = OptimConfig {
        lr: 1.0,
        warmup_steps: 4,
        schedule: Schedule::Cosine,
        min_lr_ratio: 0.1,
        ..OptimConfig::default()
    };
    assert_eq!(
        [lr_at(3, 2, &cfg), lr_at(4, 2, &cfg), lr_at(5, 2, &cfg)],
        [1.0, 1.0, 0.1]
    );
}
